"""A file of the wrong kind is named as such, not met with an unknown-key error."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardrepro.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("args", "message"), [
    (["fetch", "runners/toy-hf.toml"], "this is a run profile, not a lock (expected by `fetch`)"),
    (["verify", "cohorts/toy-64.toml"], "this is a cohort spec, not a lock (expected by `verify`)"),
    (["run", "--profile", "locks/toy-guard.toml", "--cohort", "{cohort}", "--out", "r"],
     "this is a lock, not a run profile (expected by `run`)"),
    (["gate", "{cohort}", "--spec", "cohorts/toy-64.toml"],
     "this is a cohort spec, not a gate spec (expected by `gate`)"),
    (["stats", "{cohort}", "--replicates", "10"],
     "line 1: this is a cohort (JSONL rows), not a predictions file (expected by `stats`)"),
])
def test_wrong_kind_is_named(args: list[str], message: str, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    from guardrepro.bench.cohort.build import build_cohort_file

    cohort = tmp_path / "cohort.jsonl"
    build_cohort_file(ROOT / "cohorts/toy-64.toml", ROOT / "guardrepro/data/toy_bench", cohort)
    monkeypatch.chdir(ROOT)
    capsys.readouterr()
    code = main([a.format(cohort=cohort) for a in args])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert "unknown key" not in err
