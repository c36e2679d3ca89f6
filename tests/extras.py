"""Skip markers for tests that need an optional extra, with the install line
as the reason (as the MLX and vLLM tests do)."""

from __future__ import annotations

import importlib.util

import pytest


def _missing(module: str) -> bool:
    return importlib.util.find_spec(module) is None


needs_matplotlib = pytest.mark.skipif(
    _missing("matplotlib"), reason="figures need matplotlib (pip install 'guardrepro[report]')")
needs_pyarrow = pytest.mark.skipif(
    _missing("pyarrow"), reason="Parquet export needs pyarrow (pip install 'guardrepro[report]')")
