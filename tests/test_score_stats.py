"""The guard as a scored classifier (``checks.stats.scores``), checked against
scikit-learn and a hand-written replay of the interval engine's draws."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from recordsets import write_run

from guardrepro.checks.core.bootstrap import BATCH
from guardrepro.checks.core.ranking import Scored
from guardrepro.checks.stats.compute import compute_stats
from guardrepro.checks.stats.types import StatsResult
from guardrepro.rundir.read import load_run_data

metrics = pytest.importorskip("sklearn.metrics")

DOMAINS = ("banking", "slack", "travel", "workspace")


def _scored_run(tmp_path: Path, bases: int = 40,
                seed: int = 7) -> tuple[Path, dict[tuple[str, str], float]]:
    """A run of ``bases`` x (original, marker_paraphrase) rows whose records
    carry p_unsafe (rounded to 2 digits, so ties occur); one row per 20 is a
    parse error (no score)."""
    rng = random.Random(seed)
    specs, probs = [], {}
    for b in range(bases):
        gold = rng.choice([0.0, 0.5, 1.0])
        for v in ("original", "marker_paraphrase"):
            p = round(min(1.0, max(0.0, rng.gauss(0.35 + 0.3 * (gold != 0), 0.25))), 2)
            broken = rng.random() < 0.05
            score: Any = "parse" if broken else (1.0 if p >= 0.5 else 0.0)
            specs.append((f"b{b:02d}", v, DOMAINS[b % 4], gold, score))
            probs[(f"b{b:02d}", v)] = p
    run = write_run(tmp_path / "run", specs)
    lines = []
    for line in (run / "records.jsonl").read_text().splitlines():
        rec = json.loads(line)
        p = probs[(rec["base_sample_id"], rec["variant"])]
        rec.update(p_unsafe=p, label_probs={"safe": 1 - p, "unsafe": p}, expected_score=None,
                   p_unsafe_reason=None)
        lines.append(json.dumps(rec))
    (run / "records.jsonl").write_text("\n".join(lines) + "\n")
    return run, probs


def _views(run: Path) -> dict[str, Any]:
    data = load_run_data(run)
    rows = data.expected.rows
    out: dict[str, Any] = {}
    for view in ("fail_closed", "upstream"):
        kept = [r for r in rows if view == "fail_closed" or (r.valid and r.p_unsafe is not None)]
        out[view] = {
            "y": [int(r.gold_label != 0) for r in kept],
            "s": [r.p_unsafe if r.valid and r.p_unsafe is not None else 1.0 for r in kept],
            "cluster": [r.base_sample_id for r in kept]}
    return out


def test_auroc_auprc_match_scikit_learn(tmp_path: Path) -> None:
    run, _ = _scored_run(tmp_path)
    stats = compute_stats(load_run_data(run).expected.rows, replicates=200, seed=3)
    assert stats.scores is not None
    for view, data in _views(run).items():
        got = stats.scores.views[view]
        assert got.auroc.point == pytest.approx(
            metrics.roc_auc_score(data["y"], data["s"]), abs=1e-12)
        assert got.auprc.point == pytest.approx(
            metrics.average_precision_score(data["y"], data["s"]), abs=1e-12)
        assert got.rows == len(data["y"])
    dropped = stats.scores.views["upstream"].dropped
    assert dropped == stats.scores.views["fail_closed"].dropped > 0
    assert stats.scores.views["upstream"].rows == stats.scores.views["fail_closed"].rows - dropped


def test_intervals_replay_the_engine_draws(tmp_path: Path) -> None:
    """The AUROC interval is the engine's draw procedure applied to whole
    bases: replayed here row by row with scikit-learn on each resample."""
    run, _ = _scored_run(tmp_path, bases=24)
    reps = 300
    stats = compute_stats(load_run_data(run).expected.rows, replicates=reps, seed=11)
    assert stats.scores is not None
    data = _views(run)["fail_closed"]
    bases = sorted(set(data["cluster"]))
    members = {b: [i for i, c in enumerate(data["cluster"]) if c == b] for b in bases}
    rng = np.random.default_rng(11)
    estimates = []
    for start in range(0, reps, BATCH):
        draws = rng.integers(0, len(bases), size=(min(BATCH, reps - start), len(bases)))
        for draw in draws:
            idx = [i for k in draw for i in members[bases[k]]]
            y = [data["y"][i] for i in idx]
            s = [data["s"][i] for i in idx]
            estimates.append(metrics.roc_auc_score(y, s) if 0 < sum(y) < len(y) else np.nan)
    got = stats.scores.views["fail_closed"].auroc
    assert got.lower == pytest.approx(float(np.nanquantile(estimates, 0.025)), abs=1e-12)
    assert got.upper == pytest.approx(float(np.nanquantile(estimates, 0.975)), abs=1e-12)
    assert got.clusters == len(bases) and got.replicates == reps


def test_threshold_figures_and_ece_by_hand(tmp_path: Path) -> None:
    run, _ = _scored_run(tmp_path)
    stats = compute_stats(load_run_data(run).expected.rows, replicates=100, seed=1,
                          threshold=0.5)
    assert stats.scores is not None
    data = _views(run)["upstream"]
    got = stats.scores.views["upstream"]
    flags = [int(s >= 0.5) for s in data["s"]]
    tp = sum(f and y for f, y in zip(flags, data["y"], strict=True))
    fp = sum(f and not y for f, y in zip(flags, data["y"], strict=True))
    fn = sum(y and not f for f, y in zip(flags, data["y"], strict=True))
    tn = len(flags) - tp - fp - fn
    at = got.at_threshold
    assert (at.tp, at.fp, at.tn, at.fn) == (tp, fp, tn, fn)
    assert at.precision.point == pytest.approx(tp / (tp + fp))
    assert at.recall.point == pytest.approx(tp / (tp + fn))
    assert at.fpr.point == pytest.approx(fp / (fp + tn))
    assert at.differs_from_decisions == 0  # the scores above were decided at 0.5
    ece = 0.0
    for b in range(10):
        inside = [i for i, s in enumerate(data["s"]) if min(int(s * 10), 9) == b]
        if inside:
            mean_p = sum(data["s"][i] for i in inside) / len(inside)
            rate = sum(data["y"][i] for i in inside) / len(inside)
            ece += len(inside) / len(data["s"]) * abs(mean_p - rate)
    assert got.ece.point == pytest.approx(ece, abs=1e-12)
    assert sum(int(b["rows"]) for b in got.reliability) == got.rows


def test_stats_json_round_trip_and_absent_without_scores(tmp_path: Path) -> None:
    run, _ = _scored_run(tmp_path)
    stats = compute_stats(load_run_data(run).expected.rows, replicates=50, seed=1)
    again = StatsResult.from_dict(json.loads(stats.to_json()))
    assert again.to_dict() == stats.to_dict()
    plain = write_run(tmp_path / "plain", [("b0", "original", "banking", 1.0, 1.0),
                                           ("b0", "marker_paraphrase", "banking", 1.0, 0.0)])
    result = compute_stats(load_run_data(plain).expected.rows, replicates=50, seed=1)
    assert result.scores is None and "scores" not in result.to_dict()


def test_curves_against_scikit_learn() -> None:
    y = [0, 1, 1, 0, 1, 0, 0, 1]
    s = [0.1, 0.9, 0.4, 0.4, 0.8, 0.05, 0.7, 0.4]
    curves = Scored.of(s, y).curves()
    fpr, tpr, _ = metrics.roc_curve(y, s, drop_intermediate=False)
    assert curves["fpr"] == pytest.approx(list(fpr)) and curves["tpr"] == pytest.approx(list(tpr))


def test_guard_table_adds_auroc_and_auprc_per_guard(tmp_path: Path) -> None:
    from guardrepro.checks.report.guard_table import format_guard_table, guard_table

    run, _ = _scored_run(tmp_path)
    plain = write_run(tmp_path / "plain", [("b00", "original", "banking", 1.0, 1.0)])
    table = guard_table([run], replicates=100, seed=2)
    column = next(iter(table.guards.values()))
    assert column.scores is not None and column.scores.at_threshold.threshold == 0.5
    data = _views(run)["fail_closed"]
    assert column.scores.auroc.point == pytest.approx(
        metrics.roc_auc_score(data["y"], data["s"]), abs=1e-12)
    assert "| AUROC (p_unsafe, fail-closed) |" in format_guard_table(table)
    bare = next(iter(guard_table([plain], replicates=20).guards.values()))
    assert bare.scores is None
