"""guardrepro.checks.parity.compare and `guardrepro compare` on two hand-made runs with
known divergences.

Expected values below are worked out by hand from the row table, not by the code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from recordsets import PROVENANCE

from guardrepro.checks.core.figure import RATE, encode
from guardrepro.checks.parity.compare import compare_runs, first_divergence, quantiles
from guardrepro.cli import cli
from guardrepro.errors import InputError
from guardrepro.rundir.read import read_records_file
from guardrepro.schema import Provenance, Record, Timings

# An unregistered guard: these hand-made records carry no output text to re-parse.
HAND_MADE = Provenance.from_dict({**PROVENANCE, "guard": "hand-made"})

# row_id: (tokens, score or status, margin) for run A and run B
RUN_A: dict[str, tuple[list[int], Any, float | None]] = {
    "r1": ([1, 2, 3], 0.0, 5.0),            # identical in B
    "r2": ([1, 2, 3], 0.0, 0.1),            # B diverges at 2, score 0 -> 1
    "r3": ([1, 2], 0.5, 1.0),               # B extends it (diverges at 2), 0.5 -> 1
    "r4": ([1], 0.0, 0.3),                  # B: parse error (fail-closed 1)
    "r5": ([], "inference_error", None),    # both failed, no tokens
    "r6": ([9], 1.0, 2.0),                  # only in A
}
RUN_B: dict[str, tuple[list[int], Any, float | None]] = {
    "r1": ([1, 2, 3], 0.0, 4.0),
    "r2": ([1, 2, 4], 1.0, 0.2),
    "r3": ([1, 2, 3], 1.0, 0.6),
    "r4": ([2], "parse_error", None),
    "r5": ([], "inference_error", None),
    "r7": ([9], 1.0, 2.0),                  # only in B
}


def _record(run_id: str, row_id: str, tokens: list[int], outcome: Any,
            margin: float | None) -> Record:
    status = outcome if isinstance(outcome, str) else "ok"
    return Record(
        run_id=run_id, row_id=row_id, base_sample_id="b-" + row_id, cohort="c",
        variant="original", domain="banking", gold_label=0.0, input_sha256="a" * 64,
        prompt_tokens=10, provenance_sha256="b" * 64, provenance=HAND_MADE, status=status,
        score=None if status != "ok" else float(outcome),
        error_type=None if status == "ok" else "x", components=None,
        decision_margin=margin, output_text="", output_token_ids=list(tokens),
        finish_reason="stop", attempts=(), timings=Timings(0.0, 0.0, 0.0), peak_memory_bytes=None,
        created_at="2026-01-01T00:00:00Z",
    )


def _write_run(directory: Path, rows: dict[str, tuple[list[int], Any, float | None]]) -> Path:
    directory.mkdir(parents=True)
    lines = [json.dumps(_record(directory.name, rid, *spec).to_dict()) for rid, spec in
             rows.items()]
    (directory / "records.jsonl").write_text("\n".join(lines) + "\n")
    return directory


@pytest.fixture()
def runs(tmp_path: Path) -> tuple[Path, Path]:
    return _write_run(tmp_path / "a", RUN_A), _write_run(tmp_path / "b", RUN_B)


def test_first_divergence_by_hand() -> None:
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 2, 4]) == 2
    assert first_divergence([1, 2], [1, 2, 3]) == 2
    assert first_divergence([], [5]) == 0
    assert first_divergence([], []) is None


def test_compare_finds_exactly_the_known_divergences(runs: tuple[Path, Path]) -> None:
    comparison = compare_runs(*runs)
    rows = {r.row_id: r for r in comparison.rows}
    assert list(rows) == ["r1", "r2", "r3", "r4", "r5"]
    assert comparison.only_a == ["r6"] and comparison.only_b == ["r7"]
    assert {rid: r.first_divergence for rid, r in rows.items()} == {
        "r1": None, "r2": 2, "r3": 2, "r4": 0, "r5": None}
    assert {rid: r.exact_agree for rid, r in rows.items()} == {
        "r1": True, "r2": False, "r3": False, "r4": None, "r5": None}
    assert {rid: r.strict_agree for rid, r in rows.items()} == {
        "r1": True, "r2": False, "r3": True, "r4": False, "r5": False}  # r5: both invalid
    assert (rows["r4"].strict_a, rows["r4"].strict_b) == (0, 1)  # parse error fails closed
    assert (rows["r2"].margin_a, rows["r2"].margin_b) == (0.1, 0.2)

    s = comparison.summary()
    assert (s.rows_a, s.rows_b, s.rows_in_both, s.only_in_a, s.only_in_b) == (6, 6, 5, 1, 1)
    assert (s.identical_tokens.count, s.identical_tokens.denominator) == (2, 5)
    assert s.identical_tokens.point == 0.4
    assert (s.exact_score_agreement.count, s.exact_score_agreement.denominator) == (1, 3)
    assert encode(s.strict_agreement, RATE) == {"count": 2, "denominator": 5, "rate": 0.4}
    assert s.strict_disagreements == ("r2", "r4", "r5")
    assert s.score_disagreements == ("r2", "r3")
    assert s.token_divergences == ("r2", "r3", "r4")
    assert s.valid_b.count == 3
    # Margins of A: agreeing rows r1 (5.0), r3 (1.0); disagreeing r2 (0.1), r4 (0.3), r5 (missing)
    agree_a = s.margins["strict_agree"].a
    assert (agree_a.n, agree_a.missing, agree_a.q50) == (2, 0, 3.0)
    disagree_a = s.margins["strict_disagree"].a
    assert (disagree_a.n, disagree_a.missing) == (2, 1)
    assert disagree_a.q50 == pytest.approx(0.2)
    assert disagree_a.q100 == 0.3
    # the JSON reads back as the same typed values
    data = comparison.to_dict()
    assert type(comparison).from_dict(data) == comparison
    assert type(s).from_dict(data["summary"]) == s


def test_unparsable_on_both_sides_never_agrees(tmp_path: Path) -> None:
    # 8 rows, every output unparsable in both runs: 0/8 valid, so 0/8 agree
    bad = {f"r{i}": ([i], "parse_error", None) for i in range(8)}
    comparison = compare_runs(_write_run(tmp_path / "a", bad), _write_run(tmp_path / "b", bad))
    s = comparison.summary()
    assert s.valid_a.count == 0 and s.identical_tokens.count == 8
    assert encode(s.strict_agreement, RATE) == {"count": 0, "denominator": 8, "rate": 0.0}


def test_quantiles_by_hand() -> None:
    q = quantiles([4.0, None, 1.0, 2.0, 3.0])
    assert (q.n, q.missing, q.q00, q.q25, q.q50, q.q100) == (4, 1, 1.0, 1.75, 2.5, 4.0)
    assert quantiles([]).q50 is None


def test_duplicate_row_ids_are_refused(tmp_path: Path) -> None:
    run = _write_run(tmp_path / "dup", {"r1": ([1], 0.0, 1.0)})
    line = (run / "records.jsonl").read_text()
    (run / "records.jsonl").write_text(line + line)
    with pytest.raises(InputError, match="r1"):
        read_records_file(run)


def test_cli_table_and_json(runs: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "cmp.json"
    result = CliRunner().invoke(cli, ["compare", str(runs[0]), str(runs[1] / "records.jsonl"),
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "identical tokens   2/5 (40.0%)" in result.output
    assert "strict agree       2/5 (40.0%)" in result.output
    assert "exact score agree  1/3 (33.3%)" in result.output
    assert "only in A: r6" in result.output and "only in B: r7" in result.output
    data = json.loads(out.read_text())
    assert data["summary"]["strict_disagreements"] == ["r2", "r4", "r5"]
    assert [r["row_id"] for r in data["rows"]] == ["r1", "r2", "r3", "r4", "r5"]
