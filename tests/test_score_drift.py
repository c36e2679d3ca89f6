"""Per-row P(unsafe) drift between two runs (``checks.stats.drift``, compare)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from recordsets import write_run

from guardrepro.checks.parity.compare import compare_runs
from guardrepro.checks.stats.drift import score_drift


def test_drift_figures_by_hand() -> None:
    ids = [f"r{i}" for i in range(8)]
    a = [0.1, 0.2, 0.4, 0.6, 0.9, None, 0.3, 0.55]
    b = [0.1, 0.25, 0.6, 0.6, 0.75, 0.5, 0.3000001, 0.45]
    strict_a = [0, 0, 0, 1, 1, 1, 0, 1]
    strict_b = [0, 0, 1, 1, 1, 1, 0, 1]
    d = score_drift(ids, a, b, [f"b{i // 2}" for i in range(8)], strict_a, strict_b,
                    replicates=200, seed=5)
    assert d is not None
    deltas = [abs(y - x) for x, y in zip(a, b, strict=True) if x is not None and y is not None]
    assert d.rows == 7 and d.missing == 1
    assert d.mean.point == pytest.approx(float(np.mean(deltas)))
    assert d.p95.point == pytest.approx(float(np.quantile(deltas, 0.95, method="inverted_cdf")))
    assert d.max.point == pytest.approx(max(deltas)) and d.largest_row == "r2"
    assert d.crossings == 2 and set(d.crossing_rows) == {"r2", "r7"}  # 0.4->0.6, 0.55->0.45
    assert d.flipped == 1
    # moved (> 1e-6) and same decision: r1, r4, r7 (r6 moved 1e-7: held, not moved)
    assert d.moved_but_held == 3
    lo, point, hi = d.max.lower, d.max.point, d.max.upper
    assert lo is not None and point is not None and hi is not None and lo <= point <= hi


def _scored(run: Path, probs: list[float]) -> None:
    lines = []
    for p, line in zip(probs, (run / "records.jsonl").read_text().splitlines(), strict=True):
        rec = json.loads(line)
        rec.update(p_unsafe=p, label_probs={"safe": 1 - p, "unsafe": p}, expected_score=None,
                   p_unsafe_reason=None)
        lines.append(json.dumps(rec))
    (run / "records.jsonl").write_text("\n".join(lines) + "\n")


def test_compare_reports_the_largest_difference(tmp_path: Path) -> None:
    specs = [(f"b{i}", "original", "banking", 1.0, 1.0) for i in range(6)]
    a, b = write_run(tmp_path / "a", specs), write_run(tmp_path / "b", specs)
    _scored(a, [0.9, 0.8, 0.7, 0.95, 0.99, 0.6])
    _scored(b, [0.9, 0.81, 0.7, 0.95, 0.99, 0.9])
    comparison = compare_runs(a, b)
    drift = comparison.summary().score_drift
    assert drift is not None and drift.max.point == pytest.approx(0.3)
    assert drift.largest_row == comparison.rows[5].row_id
    data = comparison.to_dict()
    assert data["summary"]["score_drift"]["max"]["point"] == pytest.approx(0.3)
    assert data["rows"][0]["p_unsafe_a"] == 0.9


def test_compare_without_p_unsafe_writes_no_drift(tmp_path: Path) -> None:
    specs = [(f"b{i}", "original", "banking", 1.0, 1.0) for i in range(3)]
    a, b = write_run(tmp_path / "a", specs), write_run(tmp_path / "b", specs)
    data = compare_runs(a, b).to_dict()
    assert "score_drift" not in data["summary"]
    assert "p_unsafe_a" not in data["rows"][0] and "base_sample_id" not in data["rows"][0]


def test_attribute_separates_moved_but_held_from_flipped(tmp_path: Path) -> None:
    from guardrepro.checks.parity.attribute import attribute, format_table
    from guardrepro.checks.parity.loaders import load_reference, load_run_input

    ref_specs = [(f"b{i}", "original", "banking", 1.0, 1.0) for i in range(4)]
    run_specs = [*ref_specs[:3], ("b3", "original", "banking", 1.0, 0.0)]
    ref, run = write_run(tmp_path / "ref", ref_specs), write_run(tmp_path / "run", run_specs)
    _scored(ref, [0.9, 0.8, 0.7, 0.6])
    _scored(run, [0.9, 0.6, 0.7, 0.4])  # b1 moved and held, b3 flipped, b0/b2 unmoved
    reference, key_field, info = load_reference(ref)
    att = attribute(reference, key_field=key_field, reference_info=info,
                    bf16=load_run_input(run, key_field), replicates=50)
    drift = att.runs[0].score_drift
    assert drift is not None
    assert (drift.moved_but_held, drift.flipped, drift.crossings) == (1, 1, 1)
    assert drift.max.point == pytest.approx(0.2)
    assert "moved but held" in format_table(att)
    assert att.to_dict()["runs"][0]["score_drift"]["flipped"] == 1


def test_sweep_summary_lists_drift_per_configuration(tmp_path: Path) -> None:
    from guardrepro.experiments.frontier import load_config
    from guardrepro.experiments.outputs import config_drifts

    specs = [(f"b{i}", "original", "banking", 1.0, 1.0) for i in range(4)]
    ref, q8, q4 = (write_run(tmp_path / n, specs) for n in ("ref", "q8", "q4"))
    _scored(ref, [0.9, 0.8, 0.7, 0.6])
    _scored(q8, [0.9001, 0.8, 0.7002, 0.6])
    _scored(q4, [0.8, 0.7, 0.75, 0.65])
    drifts = config_drifts([load_config(ref, "ref"), load_config(q8, "q8"),
                            load_config(q4, "q4")], "ref")
    d8, d4 = drifts["q8"], drifts["q4"]
    assert d8 is not None and d4 is not None and "ref" not in drifts
    assert d8.mean.point == pytest.approx((1e-4 + 2e-4) / 4)
    assert d4.mean.point == pytest.approx((0.1 + 0.1 + 0.05 + 0.05) / 4)
    assert (d8.mean.point or 1.0) < (d4.mean.point or 0.0)
