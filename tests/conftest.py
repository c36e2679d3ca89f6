"""Fixtures shared by the test modules: a loopback HTTP server per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from loopback import LoopbackServer


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as srv:
        yield srv


# ---------------------------------------------------------------- test tiers
# ``slow`` and ``faults`` are opt-in: a test so marked is skipped (with the
# reason) unless its tier is asked for, by ``--run-slow`` / ``--run-faults``,
# ``--all-tiers`` (scripts/test.sh, hence .ci/run) or a ``-m`` expression
# naming the tier (``-m faults``).
TIERS = ("slow", "faults")


def pytest_addoption(parser: pytest.Parser) -> None:
    for tier in TIERS:
        parser.addoption(f"--run-{tier}", action="store_true", help=f"run the {tier} tier")
    parser.addoption("--all-tiers", action="store_true", help="run every tier")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = str(config.getoption("markexpr") or "")
    for tier in TIERS:
        if (config.getoption("all_tiers") or config.getoption(f"run_{tier}")
                or tier in wanted):
            continue
        skip = pytest.mark.skip(reason=f"{tier} tier: pass --run-{tier} or --all-tiers "
                                f"(scripts/test.sh runs every tier)")
        for item in items:
            if item.get_closest_marker(tier) is not None:
                item.add_marker(skip)
