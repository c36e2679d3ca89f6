"""Fixtures shared by the test modules: a loopback HTTP server per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from loopback import LoopbackServer


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as srv:
        yield srv
