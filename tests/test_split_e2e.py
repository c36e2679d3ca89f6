"""Toy splits end to end: cohort build, run (rule guard, toy guard), gate,
compare and the audit rungs against released-style predictions.

The released predictions are made here from the run itself with known edits
(rows 0 and 3 get the opposite strict decision, row 5 is null), so the
disagreements are known before the gate runs: exactly those three rows, in
that order, and every figure follows by counting (done here from the records
file, not by the gate's code).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from splitsets import write_gate_spec, write_lock, write_released

from guardrepro.bench.tsbench import BENCHMARK_FILES
from guardrepro.cli import main

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "guardrepro" / "data" / "toy_bench"
FLIPPED, NULL = (0, 3), 5


def _strict(score: float | None) -> int:
    return 0 if score == 0 else 1


def _toy_tree(tmp: Path, benchmark: str, released: list[float | None] | None) -> Path:
    """The toy split's files copied into a ToolSafe tree (and released logs),
    pinned by tmp/locks/toolsafe.toml."""
    root = tmp / "toolsafe"
    raws: list[dict[str, Any]] = []
    for rel in BENCHMARK_FILES[benchmark]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(TOY / rel, root / rel)
        raws += json.loads((TOY / rel).read_text(encoding="utf-8"))
    if released is not None:
        write_released(root, benchmark, raws, released)
    write_lock(root, tmp / "locks" / "toolsafe.toml")
    return root


def _records(run: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines()]


def _build_and_run(tmp: Path, benchmark: str, profile: str, name: str,
                   extra: tuple[str, ...] = ()) -> tuple[Path, Path]:
    cohort = tmp / f"{benchmark}.jsonl"
    if not cohort.exists():
        assert main(["cohort", "build", str(ROOT / f"cohorts/toy-{benchmark}-all.toml"),
                     "--data-dir", str(TOY), "--out", str(cohort)]) == 0
    run = tmp / "runs" / name
    assert main(["run", "--profile", str(ROOT / "runners" / profile), "--cohort", str(cohort),
                 "--out", str(run), "--no-progress", *extra]) == 0
    return cohort, run


@pytest.mark.parametrize("benchmark", ["agentdojo", "agentharm", "asb"])
def test_rule_guard_run_gated_against_released(tmp_path: Path, benchmark: str,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GUARDREPRO_HOME", str(tmp_path / "home"))
    _, run = _build_and_run(tmp_path, benchmark, "rule-nuisance.toml", "rule")
    recs = _records(run)
    n = len(recs)
    released: list[float | None] = [r["score"] for r in recs]
    for i in FLIPPED:
        released[i] = 1 - _strict(recs[i]["score"])
    released[NULL] = None
    _toy_tree(tmp_path, benchmark, released)
    spec = write_gate_spec(tmp_path, benchmark, "reference")
    gold = [_strict(r["gold_label"]) for r in recs]
    bad = {*FLIPPED, NULL}
    by_class = [(sum(1 for i in range(n) if gold[i] == c and i not in bad),
                 sum(1 for i in range(n) if gold[i] == c)) for c in (0, 1)]
    passes = (n - 3) / n >= 0.90 and all(a / b >= 0.85 for a, b in by_class if b)
    assert main(["gate", str(run), "--spec", str(spec)]) == (0 if passes else 3)
    gate = json.loads((run / "gate.json").read_text())
    f = gate["figures"]
    assert (f["strict_agreement"]["numerator"], f["strict_agreement"]["denominator"]) == (n - 3, n)
    assert (f["exact_agreement"]["numerator"], f["exact_agreement"]["denominator"]) == (
        n - 3, n - 1)
    safe = f["strict_agreement_gold_safe"]
    assert (safe["numerator"], safe["denominator"]) == by_class[0]
    rows = gate["agreement"]["disagreements"]
    assert [d["row_id"] for d in rows] == [recs[i]["row_id"] for i in (0, 3, 5)]
    assert [d["reason"] for d in rows] == ["strict", "strict", "reference_invalid"]
    # compare: the same figures, never a failure
    capsys.readouterr()
    assert main(["compare", str(run), str(spec), "--json"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    assert cmp["agreement"]["strict"]["numerator"] == n - 3
    assert [d["row_id"] for d in cmp["agreement"]["disagreements"]] == [
        recs[i]["row_id"] for i in (0, 3, 5)]


def test_toy_guard_run_of_a_split_through_gate_and_compare(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The toy guard on the first 6 rows of the toy AgentHarm split, gated
    against released predictions equal to the gold scores: 19 rows are missing
    (disagreements), and a present row agrees when it parsed and its strict
    decision is the gold one."""
    home = tmp_path / "home"
    monkeypatch.setenv("GUARDREPRO_HOME", str(home))
    assert main(["fetch", str(ROOT / "locks/toy-guard.toml"), "--no-progress"]) == 0
    _, toy = _build_and_run(tmp_path, "agentharm", "toy-hf.toml", "toy",
                            ("--limit", "6", "--workers", "1"))
    _, rule = _build_and_run(tmp_path, "agentharm", "rule-nuisance.toml", "rule")
    gold = [r["gold_label"] for r in _records(rule)]
    _toy_tree(tmp_path, "agentharm", list(gold))
    spec = write_gate_spec(tmp_path, "agentharm", 25)
    toy_recs = _records(toy)
    assert len(toy_recs) == 6 and len(gold) == 25
    agree = sum(1 for r in toy_recs
                if r["status"] == "ok" and _strict(r["score"]) == _strict(r["gold_label"]))
    assert main(["gate", str(toy), "--spec", str(spec)]) == 3  # 6/25 present
    gate = json.loads((toy / "gate.json").read_text())
    assert gate["figures"]["rows_present"]["numerator"] == 6
    assert gate["figures"]["strict_agreement"]["numerator"] == agree
    assert gate["agreement"]["disagreements_by_reason"]["missing"] == 19
    # two runs of one split cohort compare row by row (row id = base sample id)
    rule_by_id = {r["row_id"]: r for r in _records(rule)}
    both = sum(1 for r in toy_recs if r["status"] == "ok"
               and _strict(r["score"]) == _strict(rule_by_id[r["row_id"]]["score"]))
    capsys.readouterr()
    assert main(["compare", str(toy), str(rule), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["rows_in_both"] == 6 and summary["only_in_b"] == 19
    assert summary["strict_agreement"]["count"] == both
    # and side by side on the split: the toy guard's upstream view keeps its 6
    # parsed rows' predictions only, the rule's covers all 25
    capsys.readouterr()
    assert main(["guard-table", "--splits", str(toy), str(rule), "--data-dir", str(TOY),
                 "--mode", "strict", "--replicates", "0", "--no-progress", "--json"]) == 0
    cells = {(c["label"], c["view"]): c for c in json.loads(capsys.readouterr().out)["cells"]}
    valid = [r for r in toy_recs if r["status"] == "ok"]
    assert cells[("toy-guard", "upstream")]["kept"] == len(valid)
    assert cells[("toy-guard", "upstream")]["accuracy"] == pytest.approx(agree / len(valid))
    rule_right = sum(1 for r in rule_by_id.values()
                     if _strict(r["score"]) == _strict(r["gold_label"]))
    assert cells[("rule-nuisance", "fail_closed")]["accuracy"] == pytest.approx(rule_right / 25)


def test_audit_rungs_on_a_toy_split_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GUARDREPRO_HOME", str(tmp_path / "home"))
    _, run = _build_and_run(tmp_path, "agentdojo", "rule-nuisance.toml", "rule")
    recs = _records(run)
    correct = sum(1 for r in recs if _strict(r["score"]) == _strict(r["gold_label"]))
    capsys.readouterr()
    assert main(["audit", "tool-lookup", "--data-dir", str(TOY), "--preds", str(run),
                 "--json"]) == 0
    g = json.loads(capsys.readouterr().out)["guard"]
    assert (g["rows"], g["valid"], g["missing"]) == (len(recs), len(recs), 0)
    assert g["guard"]["accuracy"]["numerator"] == correct
    assert main(["audit", "association", "--data-dir", str(TOY), "--preds", str(run),
                 "--replicates", "200", "--json"]) == 0
    assoc = json.loads(capsys.readouterr().out)
    assert assoc["guard"]["metrics"]["accuracy"]["numerator"] == correct
