"""report.md and figures from a hand-made run (with and without gate.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from extras import needs_matplotlib
from recordsets import grid, write_run

from guardrepro.checks.report.markdown import load_gate, margin_groups
from guardrepro.cli import main
from guardrepro.rundir.read import load_run

BASES = [("b1", "banking", 0), ("b2", "banking", 1), ("b3", "slack", 0), ("b4", "slack", 1)]
LOCAL: dict[str, list[Any]] = {"original": [0, 1, 0, 1], "marker_paraphrase": [1, 1, 0, "parse"]}
REFERENCE: dict[str, list[Any]] = {"original": [0, 1, 1, 1]}
MARGINS = {"b1:original": 2.0, "b2:original": 3.0, "b3:original": 0.5, "b4:original": 4.0,
           "b1:marker_paraphrase": 0.25, "b2:marker_paraphrase": 5.0,
           "b3:marker_paraphrase": 6.0}
PNG = b"\x89PNG\r\n\x1a\n"


def test_margin_split_by_flip_without_gate(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", grid(BASES, LOCAL), margins=MARGINS)
    rows = load_run(run).rows
    title, groups, no_margin = margin_groups(rows, None)
    # edited rows: b1 flips (0 -> 1), b2 and b3 do not, b4 is a parse error
    # (no margin; it would be a fail-closed non-flip)
    assert groups == {"flipped": [0.25], "not flipped": [5.0, 6.0]}
    assert no_margin == 1
    assert "flip" in title


@needs_matplotlib
def test_report_with_gate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_run(tmp_path / "run", grid(BASES, LOCAL), margins=MARGINS)
    write_run(tmp_path / "ref", grid(BASES, REFERENCE))
    spec = tmp_path / "gate.toml"
    spec.write_text(
        'name = "tiny"\nrows = "originals"\n[reference]\ntype = "records"\n'
        'path = "ref/records.jsonl"\n[thresholds]\nexpected_rows = 4\nmin_coverage = 0.5\n'
        "min_strict_agreement = 0.5\nmin_strict_agreement_gold_safe = 0.5\n"
        "min_strict_agreement_gold_unsafe = 0.5\n", encoding="utf-8")
    assert main(["gate", str(run), "--spec", str(spec)]) == 0
    assert main(["stats", str(run), "--replicates", "300"]) == 0
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert "report.md" in out
    text = (run / "report.md").read_text()
    # b3: reference 1 vs local 0 -> 3/4 strict agreement
    assert "PASS tiny" in text and "3/4" in text
    # b1 flips; b4's parse error fails closed to 1 (no flip)
    assert "| marker_paraphrase | all_pairs | flip_rate | 1/4 | 0.25 |" in text
    assert "Causal interpretation: `eligible_for_frozen_local_q8_reproduction_only`" in text
    for name in ("flip_rates.png", "score_confusion.png", "margin_hist.png"):
        assert (run / name).read_bytes()[:8] == PNG
        # readable like report.md (a temp file renamed into place would keep mode 0600)
        assert (run / name).stat().st_mode & 0o777 == 0o644
        assert f"]({name})" in text
    gate = load_gate(run)  # gate.json read back as a GateResult
    assert gate is not None and gate.to_dict() == json.loads((run / "gate.json").read_text())
    _, groups, _ = margin_groups(load_run(run).rows, gate)
    assert groups == {"agrees with reference": [2.0, 3.0, 4.0],
                      "disagrees with reference": [0.5]}


@needs_matplotlib
def test_report_computes_missing_stats(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", grid(BASES, LOCAL))
    assert main(["report", str(run), "--replicates", "200", "--seed", "3"]) == 0
    stats = json.loads((run / "stats.json").read_text())
    assert stats["settings"]["intervals"]["seed"] == 3
    assert not (run / "score_confusion.png").exists()
    assert (run / "margin_hist.png").is_file()


def test_report_reuses_stats_only_for_the_same_inputs_and_settings(tmp_path: Path) -> None:
    import os

    run = write_run(tmp_path / "run", grid(BASES, LOCAL))

    def seed() -> int:
        return int(json.loads((run / "stats.json").read_text())["settings"]["intervals"]["seed"])

    assert main(["report", str(run), "--replicates", "200", "--seed", "3"]) == 0
    # a report asking for no particular settings reuses stats.json (seed 3 stays) ...
    assert main(["report", str(run)]) == 0 and seed() == 3
    # ... one asking for another seed recomputes it
    assert main(["report", str(run), "--replicates", "200", "--seed", "4"]) == 0 and seed() == 4
    # a newer mtime over the same record bytes is not a change ...
    records = run / "records.jsonl"
    later = (run / "stats.json").stat().st_mtime_ns + 1_000_000_000
    os.utime(records, ns=(later, later))
    assert main(["report", str(run), "--seed", "4"]) == 0 and seed() == 4
    # ... records that differ (the last record dropped: a row now missing) are
    full = records.read_text(encoding="utf-8").splitlines(keepends=True)
    records.write_text("".join(full[:-1]), encoding="utf-8")
    assert main(["report", str(run), "--replicates", "200", "--seed", "4"]) == 0
    assert json.loads((run / "stats.json").read_text())["rows"]["by_status"]["missing"] == 1
