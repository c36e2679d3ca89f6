"""Comparison keys on every figure of ``table``, ``guard-table`` and ``frontier``:
each row carries the key it was measured under, rows whose keys differ beyond
what the output compares are flagged, and a missing figure shows as "—"."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from recordsets import PROVENANCE, grid, write_run

from guardrepro.checks.io.keys import (
    MISSING_MARK,
    ComparisonKey,
    differing_parts,
    key_note,
    run_key,
)
from guardrepro.schema import Provenance

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "guardrepro" / "data" / "toy_bench"
RULE = ROOT / "runners" / "rule-nuisance.toml"
BASES = [(f"b{i}", "banking" if i % 2 else "slack", float(i % 2)) for i in range(6)]


def _key(**changes: object) -> ComparisonKey:
    base = run_key(Provenance.from_dict(PROVENANCE), benchmark="agentdojo", data_sha256="a" * 64,
                   label_mode="strict", view="fail_closed")
    return ComparisonKey(**{**base.to_dict(), **changes})  # type: ignore[arg-type]


def test_a_runs_key_comes_from_its_provenance() -> None:
    key = _key()
    assert (key.guard, key.checkpoint, key.backend, key.dtype) == (
        "toy-guard test", "0" * 64, "hf", "float32")
    assert key.decoding == {"mode": "greedy"}
    assert key.part("checkpoint") == "0" * 12 and key.part("data_sha256") == "a" * 12
    none = run_key(None, benchmark="asb", data_sha256=None, label_mode="loose", view="upstream")
    assert none.part("guard") == none.part("decoding") == MISSING_MARK
    quant = run_key(Provenance.from_dict({**PROVENANCE, "backend_config": {
        "quantization": {"bits": 8, "group_size": 64, "mode": "affine"}}}), benchmark=None,
        data_sha256=None, label_mode="strict", view="fail_closed")
    assert quant.dtype == "q8 g64 affine"


def test_the_note_names_shared_compared_and_differing_parts() -> None:
    same = [_key(), _key(guard="other v1")]
    assert differing_parts(same) == ["guard"]
    note = key_note(same, compared=("guard",))
    assert note.startswith("key: benchmark agentdojo, data_sha256 aaaaaaaaaaaa, label_mode "
                           "strict, view fail_closed, guard_spec —, checkpoint 000000000000")
    assert note.endswith("; compared: guard") and "NOT ONE KEY" not in note
    mixed = [_key(), _key(guard="other v1", decoding={"mode": "sampled"}, label_mode="loose")]
    note = key_note(mixed, compared=("guard",))
    assert "NOT ONE KEY: the rows also differ in label_mode, decoding" in note
    # a part known on one side and missing on the other differs
    assert differing_parts([_key(), _key(dtype=None)]) == ["dtype"]


def test_frontier_rows_carry_their_keys_and_flag_different_data(tmp_path: Path) -> None:
    from guardrepro.experiments.frontier import format_frontier, frontier_report, load_config

    specs = grid(BASES, {"original": [0, 1, 0, 1, 0, "parse"]})
    a = write_run(tmp_path / "a", specs)
    b = write_run(tmp_path / "b", specs[:5])  # another cohort file: another data hash
    configs = [load_config(a), load_config(b)]
    report = frontier_report(configs, reference="a", costs={"FN": 1.0, "FP": 1.0},
                             replicates=50)
    keys = [c["key"] for c in report.to_dict()["configurations"]]
    assert [k["data_sha256"] for k in keys] == [
        json.loads((tmp_path / n / "manifest.json").read_text())["cohort"]["sha256"]
        for n in ("a", "b")]
    assert {k["guard"] for k in keys} == {"toy-guard test"}
    assert all(k["label_mode"] == "strict" and k["view"] == "fail_closed" for k in keys)
    text = format_frontier(report)
    assert "NOT ONE KEY: the rows also differ in data_sha256" in text
    # the hand-made records carry no timings worth a rate: missing, shown as "—", never 0
    row = next(line for line in text.splitlines() if line.startswith("a "))
    assert row.split()[1:3] == [MISSING_MARK, MISSING_MARK]  # no artifact size, no peak memory


def test_guard_table_columns_carry_keys_and_missing_cells_are_marked(tmp_path: Path) -> None:
    from guardrepro.checks.report.guard_table import format_guard_table, guard_table

    safe = [(base, domain, 0.0) for base, domain, _ in BASES]  # no gold-unsafe row
    one = write_run(tmp_path / "one", grid(safe, {"original": [0, 1, 0, 1, 0, 1],
                                                  "marker": [0, 1, 1, 1, 0, 1]}))
    two = write_run(tmp_path / "two", grid(safe, {"original": [0, 1, 0, 1, 0, 1],
                                                  "marker": [0, 1, 1, 1, 0, 1]}))
    table = guard_table([one, two], labels=["one", "two"], replicates=0)
    keys = [table.guards[n].key for n in ("one", "two")]
    manifest = json.loads((one / "manifest.json").read_text())
    assert keys[0] == run_key(Provenance.from_dict(manifest["provenance"]),
                              benchmark="test-cohort", data_sha256=manifest["cohort"]["sha256"],
                              label_mode="strict", view="fail_closed")
    assert table.to_dict()["guards"]["one"]["key"]["backend"] == "hf"
    text = format_guard_table(table)
    assert text.splitlines()[-1].startswith("key: benchmark test-cohort")
    assert "NOT ONE KEY" not in text
    # recall over no gold-unsafe row has no value: "—" with its 0/0, never 0
    assert f"| recall | {MISSING_MARK} (0/0) | {MISSING_MARK} (0/0) |" in text


def test_table_rows_carry_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from guardrepro.bench.cohort.split import build_any_cohort_file
    from guardrepro.cli import main
    from guardrepro.run.pipeline import run_cohort

    cohort = tmp_path / "asb.jsonl"
    build_any_cohort_file(ROOT / "cohorts/toy-asb-all.toml", TOY, cohort)
    run_cohort(RULE, cohort, tmp_path / "run", limit=10, progress=False)
    args = ["table", str(tmp_path / "run"), "--benchmark", "asb", "--data-dir", str(TOY),
            "--mode", "loose", "--replicates", "50"]
    assert main([*args, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    for row in rows:
        key = row["key"]
        assert (key["view"], key["label_mode"], key["benchmark"]) == (row["view"], "loose",
                                                                       "asb")
        assert (key["guard"], key["checkpoint"], key["backend"]) == (
            "rule-nuisance rule-v1", None, "rule")
        # the guard spec the run was made with, as its manifest records it
        spec = ROOT / "guards" / "rule-nuisance.toml"
        assert key["guard_spec"] == hashlib.sha256(spec.read_bytes()).hexdigest()
    assert rows[0]["key"]["data_sha256"] == rows[1]["key"]["data_sha256"]
    assert main(args) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("key: benchmark asb") and last.endswith("; compared: view")
    assert "checkpoint —" in last
