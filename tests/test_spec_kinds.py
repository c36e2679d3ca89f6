"""A spec of the wrong kind is named as such, by every reader and every verb."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from guardrepro.artifacts.locks import load_lock
from guardrepro.artifacts.quantize.recipe import load_recipe
from guardrepro.bench.cohort.spec import load_spec as load_cohort_spec
from guardrepro.checks.io.predictions import load_rows
from guardrepro.checks.parity.gate_spec import load_spec as load_gate_spec
from guardrepro.checks.parity.published import load_published
from guardrepro.checks.parity.toolsafe_table import load_published_tables
from guardrepro.cli import main
from guardrepro.errors import InputError
from guardrepro.experiments.spec import load_sweep
from guardrepro.run.profile import RunProfile

ROOT = Path(__file__).resolve().parents[1]

# one shipped file of each TOML kind, and the words a message uses for it
SAMPLES = {
    "lock": ("locks/toy-guard.toml", "a lock"),
    "run_profile": ("runners/toy-hf.toml", "a run profile"),
    "cohort": ("cohorts/toy-64.toml", "a cohort spec"),
    "gate": ("checks/toy-guard.toml", "a gate spec"),
    "published": ("checks/published/ts-guard-q8.toml", "a published-figures spec"),
    "published_tables": ("checks/published/toolsafe-tables.toml", "a published-tables spec"),
    "sweep": ("quantize/sweeps/toy.toml", "a sweep spec"),
    "recipe": ("quantize/q8-g64.toml", "a quantization recipe"),
}
READERS: dict[str, Callable[[Path], Any]] = {
    "lock": load_lock,
    "run_profile": RunProfile.load,
    "cohort": load_cohort_spec,
    "gate": load_gate_spec,
    "published": load_published,
    "published_tables": load_published_tables,
    "sweep": load_sweep,
    "recipe": load_recipe,
}
CASES = [(reader, given) for reader in READERS for given in SAMPLES if given != reader]


@pytest.mark.parametrize(("reader", "given"), CASES)
def test_reader_names_the_kind_it_was_given(reader: str, given: str) -> None:
    path = ROOT / SAMPLES[given][0]
    with pytest.raises(InputError) as err:
        READERS[reader](path)
    assert err.value.message == f"this is {SAMPLES[given][1]}, not {SAMPLES[reader][1]}"
    assert "unknown key" not in str(err.value)


@pytest.mark.parametrize("kind", list(READERS))
def test_reader_accepts_its_own_kind(kind: str) -> None:
    READERS[kind](ROOT / SAMPLES[kind][0])


def test_a_split_cohort_declares_its_kind() -> None:
    with pytest.raises(InputError, match="this is a cohort spec, not a lock"):
        load_lock(ROOT / "cohorts/toy-asb-all.toml")


@pytest.mark.parametrize(("argv", "message"), [
    (["fetch", "runners/toy-hf.toml"],
     "this is a run profile, not a lock (expected by `fetch`)"),
    (["verify", "cohorts/toy-64.toml"],
     "this is a cohort spec, not a lock (expected by `verify`)"),
    (["cohort", "build", "locks/toy-guard.toml", "--out", "{tmp}/c.jsonl"],
     "this is a lock, not a cohort spec (expected by `cohort build`)"),
    (["gate", "{tmp}", "--spec", "runners/toy-hf.toml"],
     "this is a run profile, not a gate spec (expected by `gate`)"),
    (["quantize", "--recipe", "runners/toy-hf.toml", "--model", "locks/toy-guard.toml",
      "--out", "{tmp}/q"],
     "this is a run profile, not a quantization recipe (expected by `quantize`)"),
])
def test_cli_names_the_verb(argv: list[str], message: str, tmp_path: Path,
                            capsys: pytest.CaptureFixture[str],
                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main([*args, "--home", str(tmp_path / "home")] if args[0] in ("fetch", "verify")
                else args) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "unknown key" not in err


def test_cohort_rows_given_to_stats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    row = json.loads((ROOT / "guardrepro/data/toy_reference/records.jsonl")
                     .read_text(encoding="utf-8").splitlines()[0])
    cohort_row = {"axis": "original", "base_sample_id": row["base_sample_id"],
                  "cohort": "toy", "domain": row["domain"], "original_label": 0,
                  "sample": {}, "serialization": "released_react", "variant": "original"}
    path = tmp_path / "cohort.jsonl"
    path.write_text(json.dumps(cohort_row) + "\n", encoding="utf-8")
    with pytest.raises(InputError) as err:
        load_rows(path)
    assert err.value.line == 1
    assert err.value.message == "this is a cohort (JSONL rows), not a predictions file"
    assert main(["stats", str(path)]) == 2
    assert "not a predictions file (expected by `stats`)" in capsys.readouterr().err
