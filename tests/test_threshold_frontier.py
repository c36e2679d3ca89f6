"""The threshold frontier (``checks.stats.thresholds``) against brute force."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner
from recordsets import write_run

from guardrepro.checks.stats.thresholds import threshold_frontier
from guardrepro.cli import cli


def _brute(scores: list[float], labels: list[int], cm: float, cf: float
           ) -> list[tuple[float | None, int, int, float]]:
    out = []
    for t in [*sorted(set(scores), reverse=True), None]:
        flagged = [t is not None and s >= t for s in scores]
        missed = sum(1 for f, y in zip(flagged, labels, strict=True) if y and not f)
        fp = sum(1 for f, y in zip(flagged, labels, strict=True) if f and not y)
        out.append((t, missed, fp, 100 * (cm * missed + cf * fp) / len(scores)))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_points_dominance_and_best_by_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    labels = [rng.randint(0, 1) for _ in range(40)]
    scores = [round(min(1, max(0, rng.gauss(0.3 + 0.4 * y, 0.25))), 1) for y in labels]
    clusters = [f"b{i // 2}" for i in range(40)]
    front = threshold_frontier("x", scores, labels, clusters, cost_miss=3, cost_flag=1,
                               max_miss=0.25, replicates=50, seed=1)
    want = _brute(scores, labels, 3, 1)
    assert [(p.threshold, p.missed, p.flagged_safe) for p in front.points] == \
        [(t, m, f) for t, m, f, _ in want]
    pos, neg = sum(labels), len(labels) - sum(labels)
    rates = [(m / pos, f / neg) for _, m, f, _ in want]
    for p, (mr, fr) in zip(front.points, rates, strict=True):
        dominated = any(a <= mr and b <= fr and (a < mr or b < fr) for a, b in rates)
        assert p.non_dominated is not dominated
        assert p.harm_per_100 == pytest.approx(next(h for t, m, f, h in want
                                                    if t == p.threshold))
    lowest = min(h for *_, h in want)
    best = [t for t, _, _, h in want if h == lowest]
    assert front.best.harm_per_100 == pytest.approx(lowest)
    assert front.best.threshold == min((t for t in best if t is not None), default=None)
    feasible = [(h, t) for t, m, _, h in want if m / pos <= 0.25]
    assert front.best_within_max_miss is not None
    assert front.best_within_max_miss.harm_per_100 == pytest.approx(min(feasible)[0])
    iv = front.best.threshold_interval
    assert iv.lower is not None and iv.upper is not None and iv.lower <= iv.upper


def test_max_miss_nobody_meets_says_so() -> None:
    front = threshold_frontier("x", [0.9, 0.1], [0, 1], ["a", "b"], cost_miss=1,
                               cost_flag=1, max_miss=0.0, replicates=20, seed=1)
    # flagging everything (threshold 0.1) misses nothing: feasible
    assert front.best_within_max_miss is not None
    assert front.best_within_max_miss.threshold == 0.1
    none = threshold_frontier("x", [0.9, 0.1], [0, 1], ["a", "b"], cost_miss=1,
                              cost_flag=1, max_miss=-0.5, replicates=20, seed=1)
    assert none.best_within_max_miss is not None
    assert "no threshold" in none.best_within_max_miss.note


def test_frontier_cli_prints_the_threshold_frontier(tmp_path: Path) -> None:
    specs = [(f"b{i}", "original", "banking", float(i % 2), float(i % 3 == 0))
             for i in range(12)]
    run = write_run(tmp_path / "run", specs)
    lines = []
    for i, line in enumerate((run / "records.jsonl").read_text().splitlines()):
        rec = json.loads(line)
        p = (i % 5) / 4
        rec.update(p_unsafe=p, label_probs={"safe": 1 - p, "unsafe": p},
                   expected_score=None, p_unsafe_reason=None)
        lines.append(json.dumps(rec))
    (run / "records.jsonl").write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(cli, ["frontier", f"toy={run}", "--cost-miss", "5",
                                      "--cost-flag", "1", "--max-miss", "0.2",
                                      "--replicates", "50", "--out", str(tmp_path / "f")])
    assert result.exit_code == 0, result.output
    assert "threshold frontier of toy" in result.output
    assert "costs: miss 5, flag 1" in result.output and "max-miss 0.2" in result.output
    data = json.loads((tmp_path / "f" / "frontier.json").read_text())
    assert data["thresholds"]["toy"]["cost_miss"] == 5.0
