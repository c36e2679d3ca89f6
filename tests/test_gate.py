"""The parity gate: hand-computed figures and the exit codes 0 / 3 / 2.

Reference (a records run) originals, gold and score:
    r1 banking 0 -> 0;  r2 banking 1 -> 1;  r3 slack 0 -> 0.5;  r4 slack 1 -> 1
Local run originals:
    r1 0 (agree, exact);  r2 0.5 (strict agree, exact differs);
    r3 0 (strict disagree: reference 0.5 blocks);  r4 parse error (invalid: a
    disagreement, although its fail-closed decision 1 equals the reference's)
Hence: rows 4/4, coverage 3/4, strict agreement 2/4, gold-safe (r1, r3) 1/2,
gold-unsafe (r2, r4) 1/2, exact among jointly valid (r1, r2, r3) 1/3.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from recordsets import grid, write_run

from guardrepro.checks.io.predictions import load_rows
from guardrepro.checks.parity.gate import GateResult, RefRow, evaluate, load_spec
from guardrepro.cli import main
from guardrepro.errors import InputError
from guardrepro.rundir.read import load_run

BASES = [("r1", "banking", 0), ("r2", "banking", 1), ("r3", "slack", 0), ("r4", "slack", 1)]
REFERENCE: dict[str, list[Any]] = {"original": [0, 1, 0.5, 1], "tool_alias": [1, 1, 1, 1]}
LOCAL: dict[str, list[Any]] = {"original": [0, 0.5, 0, "parse"], "tool_alias": [0, 0, 0, 0]}
# every ratio threshold exactly at the figure it tests (>= passes)
LOOSE = {"min_coverage": 0.75, "min_strict_agreement": 0.5,
         "min_strict_agreement_gold_safe": 0.5, "min_strict_agreement_gold_unsafe": 0.5}
PUBLISHED = {"min_coverage": 0.95, "min_strict_agreement": 0.90,
             "min_strict_agreement_gold_safe": 0.85, "min_strict_agreement_gold_unsafe": 0.85}


def write_spec(path: Path, reference: Path, thresholds: dict[str, float], rows: int = 4,
               extra: str = "") -> Path:
    rel = Path("..") / reference.relative_to(path.parent.parent)
    lines = ['name = "test-gate"', 'rows = "originals"', extra, "[reference]",
             'type = "records"', f'path = "{rel.as_posix()}"', "[thresholds]",
             f"expected_rows = {rows}"]
    lines += [f"{k} = {v}" for k, v in thresholds.items()]
    lines += ["[bootstrap]", "replicates = 4000"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture()
def setup(tmp_path: Path) -> dict[str, Path]:
    ref = write_run(tmp_path / "ref", grid(BASES, REFERENCE))
    local = write_run(tmp_path / "local", grid(BASES, LOCAL))
    return {
        "ref": ref,
        "local": local,
        "loose": write_spec(tmp_path / "checks" / "loose.toml", ref / "records.jsonl", LOOSE),
        "strict": write_spec(tmp_path / "checks" / "strict.toml", ref / "records.jsonl",
                             PUBLISHED),
    }


def frac(f: dict[str, Any]) -> tuple[int, int]:
    return f["numerator"], f["denominator"]


def run_gate(args: list[str]) -> int:
    return main(args)


def test_gate_passes_exit_0_with_hand_figures(setup: dict[str, Path],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert run_gate(["gate", str(setup["local"]), "--spec", str(setup["loose"])]) == 0
    out = capsys.readouterr().out
    assert "PASS test-gate" in out
    gate = json.loads((setup["local"] / "gate.json").read_text())
    f = gate["figures"]
    assert frac(f["rows_present"]) == (4, 4)
    assert frac(f["coverage"]) == (3, 4)
    assert frac(f["strict_agreement"]) == (2, 4)
    assert frac(f["strict_agreement_gold_safe"]) == (1, 2)
    assert frac(f["strict_agreement_gold_unsafe"]) == (1, 2)
    assert frac(f["exact_agreement"]) == (1, 3)
    assert gate["passed"] is True
    assert gate["causal_interpretation"] == "eligible_for_frozen_local_q8_reproduction_only"
    assert "causal_interpretation: eligible_for_frozen_local_q8_reproduction_only" in out
    labels_r, labels_l = gate["confusion"]["row_labels"], gate["confusion"]["column_labels"]
    m = gate["confusion"]["matrix"]

    def cell(r: str, c: str) -> int:
        return m[labels_r.index(r)][labels_l.index(c)]

    assert cell("0.0", "0.0") == 1 and cell("1.0", "0.5") == 1
    assert cell("0.5", "0.0") == 1 and cell("1.0", "invalid") == 1
    assert sum(map(sum, m)) == 4
    assert [(d["row_id"], d["reason"]) for d in gate["disagreements"]] == [
        ("r3:original", "strict"), ("r4:original", "local_invalid")]
    assert {d["row_id"] for d in gate["exact_disagreements"]} == {"r2:original", "r3:original"}
    # gate.json reads back as the same typed result (one GateResult type)
    typed = GateResult.from_dict(gate)
    assert typed.to_dict() == gate
    assert typed.passed is True and [d.row_id for d in typed.disagreement_rows] == [
        "r3:original", "r4:original"]


def test_gate_json_of_another_schema_is_refused() -> None:
    with pytest.raises(InputError, match=r"gate schema 'guardrepro\.gate/1'"):
        GateResult.from_dict({"schema": "guardrepro.gate/1"}, file="gate.json")


def test_gate_fails_exit_3_and_still_writes_json(setup: dict[str, Path],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert run_gate(["gate", str(setup["local"]), "--spec", str(setup["strict"])]) == 3
    gate = json.loads((setup["local"] / "gate.json").read_text())
    failed = {c["name"] for c in gate["checks"] if not c["passed"]}
    assert failed == {"coverage", "strict_agreement", "strict_agreement_gold_safe",
                      "strict_agreement_gold_unsafe"}
    assert gate["verdict"].startswith("FAIL test-gate")
    assert gate["causal_interpretation"] == "exploratory_local_reproduction_only"
    out = capsys.readouterr().out
    assert "FAIL test-gate" in out
    assert "causal_interpretation: exploratory_local_reproduction_only" in out


@pytest.mark.parametrize("key", sorted(LOOSE))
def test_threshold_just_above_the_figure_fails(setup: dict[str, Path], tmp_path: Path,
                                               key: str) -> None:
    # LOOSE puts every threshold at its figure (passes: >=); a hair above fails
    thresholds = dict(LOOSE)
    thresholds[key] = LOOSE[key] + 1e-9
    spec = write_spec(tmp_path / "checks" / "hair.toml", setup["ref"] / "records.jsonl",
                      thresholds)
    assert run_gate(["gate", str(setup["local"]), "--spec", str(spec)]) == 3
    gate = json.loads((setup["local"] / "gate.json").read_text())
    failed = [c["name"] for c in gate["checks"] if not c["passed"]]
    assert failed == [key.removeprefix("min_")]


def test_missing_local_row_counts_as_disagreement(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # r4's original has no record: an invalid disagreement (like a parse
    # error), and the verdict is still decided on the thresholds. r1, r2, r3
    # agree: rows 3/4, coverage 3/4, strict 3/4, safe (r1, r3) 2/2, unsafe
    # (r2, r4) 1/2 -- all at or above LOOSE, so the gate passes.
    ref = write_run(tmp_path / "ref", grid(BASES, REFERENCE))
    local_scores: dict[str, list[Any]] = {"original": [0, 1, 0.5, None],
                                          "tool_alias": [0, 0, 0, 0]}
    local = write_run(tmp_path / "local", grid(BASES, local_scores), with_cohort=False)
    spec = write_spec(tmp_path / "checks" / "g.toml", ref / "records.jsonl", LOOSE)
    assert run_gate(["gate", str(local), "--spec", str(spec)]) == 0
    out = capsys.readouterr().out
    gate = json.loads((local / "gate.json").read_text())
    assert frac(gate["figures"]["rows_present"]) == (3, 4)
    assert gate["missing_rows"] == 1
    assert frac(gate["figures"]["coverage"]) == (3, 4)
    assert frac(gate["figures"]["strict_agreement"]) == (3, 4)
    assert frac(gate["figures"]["strict_agreement_gold_safe"]) == (2, 2)
    assert frac(gate["figures"]["strict_agreement_gold_unsafe"]) == (1, 2)
    assert [d["reason"] for d in gate["disagreements"]] == ["missing"]
    assert gate["disagreements"][0]["row_id"] == "r4:original"
    assert gate["passed"] is True and [c["name"] for c in gate["checks"]] == [
        "coverage", "strict_agreement", "strict_agreement_gold_safe",
        "strict_agreement_gold_unsafe"]
    assert "rows 3/4 (missing 1)" in gate["verdict"]
    assert next(x for x in out.splitlines() if x.startswith("rows_present")).split()[-4:] == [
        "missing", "1,", "truncated", "0"]
    assert GateResult.from_dict(gate).to_dict() == gate
    # with the published thresholds the same run fails on coverage and agreement
    strict = write_spec(tmp_path / "checks" / "s.toml", ref / "records.jsonl", PUBLISHED)
    assert run_gate(["gate", str(local), "--spec", str(strict)]) == 3


def test_predictions_file_gate_has_the_run_directory_denominators(tmp_path: Path) -> None:
    # released-style reference (by base id). r4's original is missing but its
    # tool_alias row is there, so the row set knows r4 is gold unsafe: unsafe
    # agreement is 1/2 (r2 agrees, r4 missing) from the run directory and from
    # the predictions file made of the same records alike.
    scores: dict[str, list[Any]] = {"original": [0, 1, 0.5, None], "tool_alias": [0, 0, 0, 0]}
    run = write_run(tmp_path / "run", grid(BASES, scores), with_cohort=False)
    preds = tmp_path / "preds.jsonl"
    preds.write_text("".join(
        json.dumps({"base_sample_id": b, "variant": v, "domain": d, "gold_label": g,
                    "score": s}) + "\n"
        for b, v, d, g, s in grid(BASES, scores) if s is not None), encoding="utf-8")
    spec = write_spec(tmp_path / "checks" / "g.toml", run / "records.jsonl", LOOSE)
    reference = {b: RefRow(b, s, True, float(g), d, b)
                 for (b, d, g), s in zip(BASES, [0.0, 1.0, 0.5, 1.0], strict=True)}
    gates = [evaluate(load_spec(spec), load_rows(p).rows, key_field="base_sample_id",
                      reference=reference).to_dict() for p in (run, preds)]
    for gate in gates:
        f = gate["figures"]
        assert frac(f["strict_agreement_gold_unsafe"]) == (1, 2)
        assert frac(f["strict_agreement_gold_safe"]) == (2, 2)
        assert frac(f["strict_agreement"]) == (3, 4) and gate["missing_rows"] == 1
        assert gate["passed"] is True
    assert gates[0]["figures"] == gates[1]["figures"]


@pytest.mark.parametrize("problem", ["bad_key", "no_records", "no_reference", "wrong_rows"])
def test_unusable_input_exit_2(setup: dict[str, Path], tmp_path: Path, problem: str) -> None:
    spec, run = setup["loose"], setup["local"]
    if problem == "bad_key":
        spec = write_spec(tmp_path / "checks" / "bad.toml", setup["ref"] / "records.jsonl",
                          LOOSE, extra="colour = 1")
    elif problem == "no_records":
        (run / "records.jsonl").unlink()
    elif problem == "no_reference":
        (setup["ref"] / "records.jsonl").unlink()
    else:
        spec = write_spec(tmp_path / "checks" / "n.toml", setup["ref"] / "records.jsonl",
                          LOOSE, rows=64)
    assert run_gate(["gate", str(run), "--spec", str(spec)]) == 2


def test_conservative_uses_bootstrap_lower_bound(tmp_path: Path) -> None:
    # 8 gold-unsafe rows in one stratum, one strict disagreement, plus 2 agreeing
    # gold-safe rows. Point: unsafe 7/8 = 0.875, overall 9/10. Bootstrap: the
    # disagreeing cluster is drawn K ~ Binomial(8, 1/8) times; P(K >= 3) = 0.067
    # and P(K >= 4) = 0.011, so the 2.5th percentile is at K = 3: 5/8 = 0.625
    # (unsafe) and 7/10 (overall, the safe stratum is fixed).
    bases = [(f"u{i}", "workspace", 1) for i in range(8)] + [("s0", "banking", 0),
                                                             ("s1", "banking", 0)]
    ref = write_run(tmp_path / "ref", grid(bases, {"original": [1] * 8 + [0, 0]}))
    local = write_run(tmp_path / "local", grid(bases, {"original": [1] * 7 + [0, 0, 0]}))
    thresholds = {"min_coverage": 0.5, "min_strict_agreement": 0.8,
                  "min_strict_agreement_gold_safe": 0.5, "min_strict_agreement_gold_unsafe": 0.8}
    spec = write_spec(tmp_path / "checks" / "c.toml", ref / "records.jsonl", thresholds, rows=10)
    assert run_gate(["gate", str(local), "--spec", str(spec)]) == 0
    assert run_gate(["gate", str(local), "--spec", str(spec), "--conservative"]) == 3
    gate = json.loads((local / "gate.json").read_text())
    tested = {c["name"]: c["tested"] for c in gate["checks"]}
    assert tested["strict_agreement_gold_unsafe"] == pytest.approx(0.625)
    assert tested["strict_agreement"] == pytest.approx(0.7)
    assert {c["name"] for c in gate["checks"] if not c["passed"]} == {
        "strict_agreement", "strict_agreement_gold_unsafe"}
    assert all(c["basis"] == "bootstrap_lower_bound" for c in gate["checks"])
    # read back typed: the ratio figures carry their interval, the count figure none
    typed = GateResult.from_dict(gate)
    assert typed.to_dict() == gate
    unsafe = typed.figures.strict_agreement_gold_unsafe
    assert unsafe.interval is not None and unsafe.interval.lower == pytest.approx(0.625)
    assert (unsafe.count, unsafe.denominator) == (7, 8)
    assert typed.figures.rows_present.interval is None
    assert "interval" not in gate["figures"]["rows_present"]
    assert [c.name for c in typed.checks if not c.passed] == [
        "strict_agreement", "strict_agreement_gold_unsafe"]


@pytest.mark.parametrize("with_cohort", [False, True])
def test_released_style_reference_by_base_id(tmp_path: Path, with_cohort: bool) -> None:
    # released alignment keys rows by base_sample_id. The run has records for
    # r1 (0, agrees) and r2 (1, agrees) only; the spec expects 4 rows. With a
    # cohort naming r1..r3, r3 is a known missing row (gold safe) and one row is
    # unknown; without it, two rows are unknown. Either way 2/4 present and
    # 2/4 strict agreement.
    local = write_run(tmp_path / "local", grid(BASES[:3], {"original": [0, 1, None]}),
                      with_cohort=with_cohort)
    spec = write_spec(tmp_path / "checks" / "g.toml", local / "records.jsonl", LOOSE)
    reference = {b: RefRow(b, s, s is not None, float(g), d, b)
                 for (b, d, g), s in zip(BASES, [0.0, 1.0, 0.5, None], strict=True)}
    rows = load_run(local).rows
    gate = evaluate(load_spec(spec), rows, key_field="base_sample_id",
                    reference=reference).to_dict()
    assert frac(gate["figures"]["rows_present"]) == (2, 4)
    assert frac(gate["figures"]["strict_agreement"]) == (2, 4)
    safe = (1, 2) if with_cohort else (1, 1)  # r1 agrees; r3 missing when known
    assert frac(gate["figures"]["strict_agreement_gold_safe"]) == safe
    assert not gate["passed"]
    stray = [*rows, rows[0].__class__("zz:original", "zz", "original", "banking", 0.0, "ok", 0.0)]
    with pytest.raises(InputError, match="no reference prediction"):
        evaluate(load_spec(spec), stray, key_field="base_sample_id", reference=reference)


def test_released_reference_end_to_end(tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A ToolSafe-layout directory pinned by a local lock, aligned by the real
    released-prediction loader. Rows (upstream order) and strict decisions:

        row  gold  released  local   released d / local d   agree  exact (jointly valid)
        w0   0     0         0       0 / 0                  yes    yes
        w1   1     1         1       1 / 1                  yes    yes
        t0   0     0.5       0       1 / 0                  no     no
        t1   1     null      1       invalid / 1            no     - (reference invalid)
        s0   0     0         0       0 / 0                  yes    yes
        s1   1     1         0.5     1 / 1                  yes    no
        b0   0     0         parse   0 / invalid            no     - (local invalid)
        b1   1     0.5       1       1 / 1                  yes    no
    -> coverage 7/8, strict 5/8, safe 2/4, unsafe 3/4, exact 3/6. An invalid
    row on either side is a disagreement even where failing closed would
    have matched the other side's decision (t1).
    """
    import hashlib

    from guardrepro.bench.tsbench import AGENTDOJO_FILES, base_sample_id

    root = tmp_path / "toolsafe"
    raws: list[dict[str, Any]] = []
    for rel, prefix in zip(AGENTDOJO_FILES, "wtsb", strict=True):
        rows = [{"id-interaction": 1, "id-segment": k, "instruction": f"{prefix}{k}",
                 "history": "h", "current_action": "a", "env_info": "e", "score": k}
                for k in (0, 1)]
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(json.dumps(rows))
        raws += rows
    logs = root / "guardian_test_logs" / "agentdojo" / "TS-Guard"
    logs.mkdir(parents=True)
    released = [0, 1, 0.5, None, 0, 1, 0, 0.5]
    (logs / "preds.json").write_text(json.dumps(released))
    (logs / "labels.json").write_text(json.dumps([r["score"] for r in raws]))
    (logs / "meta_data.json").write_text(json.dumps(
        [{"meta_sample": r, "guard_res": {"reason": "x"}} for r in raws]))
    entries = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        entries.append(f'[[file]]\npath = "{path.relative_to(root).as_posix()}"\n'
                       f'sha256 = "{hashlib.sha256(data).hexdigest()}"\nsize = {len(data)}\n')
    locks = tmp_path / "locks"
    locks.mkdir()
    (locks / "toolsafe.toml").write_text(
        'name = "toolsafe-test"\nkind = "files"\n[source]\ntype = "local"\n'
        'path = "../toolsafe"\n\n' + "\n".join(entries))
    monkeypatch.setenv("GUARDREPRO_HOME", str(tmp_path / "home"))
    spec = tmp_path / "checks" / "released.toml"
    spec.parent.mkdir()
    spec.write_text(
        'name = "released-test"\nrows = "originals"\n[reference]\ntype = "released"\n'
        'lock = "../locks/toolsafe.toml"\nbenchmark = "agentdojo"\n[thresholds]\n'
        "expected_rows = 8\n" + "".join(f"{k} = {v}\n" for k, v in LOOSE.items()))
    local_scores: list[Any] = [0, 1, 0, 1, 0, 0.5, "parse", 1]
    bases = [(base_sample_id(r), dom, r["score"]) for r, dom in
             zip(raws, [d for d in ("workspace", "travel", "slack", "banking") for _ in (0, 1)],
                 strict=True)]
    run = write_run(tmp_path / "run", grid(bases, {"original": local_scores}))
    from guardrepro.artifacts.fetch import fetch_lock

    fetch_lock(locks / "toolsafe.toml", progress=False)
    assert run_gate(["gate", str(run), "--spec", str(spec)]) == 0
    gate = json.loads((run / "gate.json").read_text())
    f = gate["figures"]
    assert frac(f["coverage"]) == (7, 8)
    assert frac(f["reference_coverage"]) == (7, 8)
    assert frac(f["strict_agreement"]) == (5, 8)
    assert frac(f["strict_agreement_gold_safe"]) == (2, 4)
    assert frac(f["strict_agreement_gold_unsafe"]) == (3, 4)
    assert frac(f["exact_agreement"]) == (3, 6)
    assert {(d["base_sample_id"], d["reason"]) for d in gate["disagreements"]} == {
        (bases[2][0], "strict"), (bases[3][0], "reference_invalid"),
        (bases[6][0], "local_invalid")}
    assert gate["reference"]["type"] == "released"


def test_gate_on_a_predictions_file(setup: dict[str, Path], tmp_path: Path) -> None:
    # the local originals of the module docstring as a predictions file (the
    # parse error is a null score): the same figures as the run directory
    preds = tmp_path / "p" / "preds.jsonl"
    preds.parent.mkdir()
    scores = [0, 0.5, 0, None]
    preds.write_text("".join(
        json.dumps({"base_sample_id": b, "variant": "original", "domain": d, "gold_label": g,
                    "score": s}) + "\n" for (b, d, g), s in zip(BASES, scores, strict=True)))
    assert run_gate(["gate", str(preds), "--spec", str(setup["loose"])]) == 0
    gate = json.loads((preds.parent / "gate.json").read_text())
    f = gate["figures"]
    assert frac(f["coverage"]) == (3, 4) and frac(f["strict_agreement"]) == (2, 4)
    assert [d["reason"] for d in gate["disagreements"]] == ["strict", "local_invalid"]
    out = tmp_path / "elsewhere"
    assert run_gate(["gate", str(preds), "--spec", str(setup["strict"]), "--out",
                     str(out)]) == 3
    assert json.loads((out / "gate.json").read_text())["passed"] is False
