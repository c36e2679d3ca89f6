"""The report's scored-classifier and drift sections (``checks.report.score_figures``)."""

from __future__ import annotations

import json
from pathlib import Path

from extras import needs_matplotlib
from recordsets import write_run

from guardrepro.checks.report.markdown import build_report


def _scored(run: Path, probs: list[float]) -> None:
    lines = []
    for p, line in zip(probs, (run / "records.jsonl").read_text().splitlines(), strict=True):
        rec = json.loads(line)
        rec.update(p_unsafe=p, label_probs={"safe": 1 - p, "unsafe": p}, expected_score=None,
                   p_unsafe_reason=None)
        lines.append(json.dumps(rec))
    (run / "records.jsonl").write_text("\n".join(lines) + "\n")


@needs_matplotlib
def test_report_shows_the_score_figures_and_the_drift(tmp_path: Path) -> None:
    specs = []
    for b in range(12):
        gold = float(b % 2)
        for v in ("original", "marker_paraphrase"):
            specs.append((f"b{b:02d}", v, "banking", gold, gold if b % 5 else 1 - gold))
    probs = [0.05 * (i % 20) for i in range(len(specs))]
    run, ref = write_run(tmp_path / "run", specs), write_run(tmp_path / "ref", specs)
    _scored(run, probs)
    _scored(ref, [min(1.0, p + 0.01) for p in probs])
    text = build_report(run, replicates=100, drift_reference=ref).read_text()
    assert "## The guard as a scored classifier (p_unsafe)" in text
    assert "AUROC" in text and "ECE" in text and "threshold frontier" in text
    assert "## p_unsafe drift against" in text and "cross 0.5" in text
    for png in ("roc_pr.png", "reliability.png", "threshold_frontier.png",
                "p_unsafe_drift.png"):
        assert (run / png).stat().st_size > 1000, png
        assert f"]({png})" in text


@needs_matplotlib
def test_report_without_p_unsafe_has_no_score_section(tmp_path: Path) -> None:
    specs = [(f"b{b}", v, "banking", 1.0, 1.0) for b in range(3)
             for v in ("original", "marker_paraphrase")]
    run = write_run(tmp_path / "run", specs)
    text = build_report(run, replicates=50).read_text()
    assert "scored classifier" not in text and not (run / "roc_pr.png").exists()
