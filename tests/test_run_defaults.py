"""A verb given a run directory takes the run's data lock and benchmark from
the cohort the run was made of (its manifest names the cohort, whose own
manifest names the data lock and benchmark), unless told otherwise.

A rule-guard run of the toy AgentDojo split: ``audit`` with ``--preds RUN``
and nothing else gives what it gives with ``--lock toy-bench --benchmark
agentdojo`` spelled out, while the real ToolSafe lock, asked for by hand, is
still the one used (and is not fetched in this home: exit 2 naming it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guardrepro.cli import main
from guardrepro.rundir.cohort import run_data_source

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("defaults")
    cohort = base / "cohort.jsonl"
    assert main(["cohort", "build", "toy-agentdojo-all", "--out", str(cohort),
                 "--no-progress"]) == 0
    assert main(["run", "--profile", "rule-nuisance", "--cohort", str(cohort), "--out",
                 str(base / "run"), "--no-progress"]) == 0
    return base / "run"


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, object]:
    capsys.readouterr()
    assert main(argv) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_the_run_names_its_data(run: Path) -> None:
    source = run_data_source(run)
    assert source.data_lock == (ROOT / "locks" / "toy-bench.toml").resolve()
    assert source.benchmark == "agentdojo"


@pytest.mark.parametrize("verb", [["association", "--replicates", "50"], ["interaction"],
                                  ["tool-lookup", "--folds", "2"]])
def test_audits_default_to_the_runs_data(run: Path, verb: list[str],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    base = ["audit", *verb, "--preds", str(run), "--json"]
    implied = _json(capsys, base)
    spelled = _json(capsys, [*base, "--lock", "toy-bench", "--benchmark", "agentdojo"])
    assert implied == spelled


def test_a_lock_given_by_hand_wins(run: Path, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    code = main(["audit", "association", "--preds", str(run), "--lock", "toolsafe",
                 "--replicates", "50", "--home", str(tmp_path / "empty")])
    assert code == 2
    assert "toolsafe" in capsys.readouterr().err
