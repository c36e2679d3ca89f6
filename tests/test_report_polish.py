"""report.md: variants in cohort order (original first), each table once, and
tables without the report extra (matplotlib hidden from the import system)."""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

import pytest
from recordsets import grid, write_run

from guardrepro.cli import main

BASES = [("b1", "banking", 0), ("b2", "slack", 1)]
# cohort order (not alphabetical): tool_alias, the original, combined, marker_paraphrase
SCORES = {"tool_alias": [1, 1], "original": [0, 1], "combined": [0, 0], "marker_paraphrase": [1, 0]}


@pytest.fixture()
def run(tmp_path: Path) -> Path:
    return write_run(tmp_path / "run", grid(BASES, SCORES))


def _variant_rows(text: str) -> list[str]:
    section = text.split("## Variants", 1)[1].split("##", 1)[0]
    return [line.split("|")[1].strip() for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| variant")]


def test_variants_in_cohort_order_and_tables_once(run: Path) -> None:
    assert main(["report", str(run), "--replicates", "200"]) == 0
    text = (run / "report.md").read_text(encoding="utf-8")
    assert _variant_rows(text) == ["original", "tool_alias", "combined", "marker_paraphrase"]
    assert "```" not in text  # no fixed-width copy of the tables
    assert text.count("| variant | coverage |") == 1


def test_tables_without_matplotlib(run: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    import importlib.util

    real_find = importlib.util.find_spec
    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real_find(name, *a))
    assert main(["report", str(run), "--replicates", "200"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "report extra" in line]
    assert lines == ["figures skipped: install the report extra "
                     "(pip install 'guardrepro[report]')"]
    text = (run / "report.md").read_text(encoding="utf-8")
    assert "| original |" in text and "## Paired statistics vs original" in text
    assert not list(run.glob("*.png"))
