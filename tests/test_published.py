"""``guardrepro vs-published`` on hand-built predictions (``q8rows``): every
published statistic the rows were solved for matches, the stratified
valid-both interval matches exactly when the independent loop says it should,
gate figures come from a gate.json, audit figures are "not computed", and
the spec is read strictly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bootref import reference_interval
from q8rows import q8_rows, write_predictions

from guardrepro.checks.parity.published import compare, load_published
from guardrepro.cli import main
from guardrepro.errors import InputError

SPEC = Path(__file__).resolve().parent.parent / "checks" / "published" / "ts-guard-q8.toml"


def run_cli(args: list[str]) -> int:
    return main(args)


def rows_of(out: str) -> dict[str, str]:
    """figure name -> its printed line."""
    names = [f.name for f in load_published(SPEC).figures]
    return {n: next(line for line in out.splitlines() if line.startswith(n + " "))
            for n in names}


def stratified_upper() -> float | None:
    """The valid-both combined flip interval's upper bound, by the independent loop."""
    dec: dict[str, dict[str, int]] = {}
    stratum: dict[str, str] = {}
    for r in q8_rows():
        dec.setdefault(r["base_sample_id"], {})[r["variant"]] = int(
            r["score"] is None or r["score"] != 0)
        stratum[r["base_sample_id"]] = f"{r['domain']}:{int(r['gold_label'] != 0)}"
    rows = [(b, stratum[b], int(v["original"] != v["combined"]), 1) for b, v in dec.items()]
    return reference_interval(rows, 10_000, 260828)[1]


def test_predictions_file_against_the_published_spec(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_predictions(tmp_path / "preds.jsonl")
    code = run_cli(["vs-published", str(path), "--spec", str(SPEC),
                    "--out", str(tmp_path / "cmp.json")])
    captured = capsys.readouterr()
    out = captured.out
    lines = rows_of(out)
    for name in ("strict accuracy: original", "strict accuracy: combined",
                 "parser coverage, all rows", "flips: tool_alias (valid_both_only)",
                 "flips: combined (all_pairs, unstratified)",
                 "combined safe_to_unsafe (all_pairs)", "combined unsafe_to_safe (all_pairs)"):
        assert lines[name].rstrip().endswith("match"), lines[name]
    assert "61/64 = 0.953125" in lines["strict accuracy: original"]
    for name in ("gate: strict agreement", "tool lookup, grouped-CV F1", "AgentHarm row F1"):
        assert lines[name].rstrip().endswith("not computed")
    data = json.loads((tmp_path / "cmp.json").read_text())
    by_name = {r["name"]: r for r in data["rows"]}
    strat = by_name["flips: combined (valid_both_only, stratified)"]
    # these rows' ids are not the published ones: the stratified interval
    # matches only if the independent loop lands on the published 0.15625
    if stratified_upper() == 0.15625:
        assert strat["status"] == "match" and code == 0
    else:
        assert strat["status"] == "MISMATCH" and strat["differing"] == ["upper"]
        assert code == 3
        assert "flips: combined (valid_both_only, stratified)" in captured.err
    assert by_name["combined safe_to_unsafe (all_pairs)"]["run"]["count"] == 4


def _q8_figures_only(tmp_path: Path) -> Path:
    """The published spec without the stratified interval (these rows cannot
    carry the published base ids it depends on)."""
    text = SPEC.read_text(encoding="utf-8")
    start = text.index('[[figure]]\nname = "flips: combined (valid_both_only, stratified)"')
    end = text.index("[[figure]]", start + 10)
    spec = tmp_path / "q8.toml"
    spec.write_text(text[:start] + text[end:], encoding="utf-8")
    return spec


def _gate_json(strict: int = 63) -> dict[str, Any]:
    def f(n: int, d: int) -> dict[str, Any]:
        return {"numerator": n, "denominator": d, "value": n / d}

    return {"figures": {"rows_present": f(64, 64), "strict_agreement": f(strict, 64),
                        "strict_agreement_gold_safe": f(31, 32),
                        "strict_agreement_gold_unsafe": f(32, 32),
                        "exact_agreement": f(58, 64)},
            "causal_interpretation": "eligible_for_frozen_local_q8_reproduction_only"}


def test_gate_figures_from_gate_json(tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = write_predictions(tmp_path / "preds.jsonl")
    spec = _q8_figures_only(tmp_path)
    gate = tmp_path / "gate.json"
    gate.write_text(json.dumps(_gate_json()), encoding="utf-8")
    assert run_cli(["vs-published", str(path), "--spec", str(spec), "--gate", str(gate)]) == 0
    lines = rows_of_spec(capsys.readouterr().out, spec)
    assert lines["gate: strict agreement"].rstrip().endswith("match")
    assert lines["gate: causal interpretation"].rstrip().endswith("match")
    # one agreement fewer: an exact figure differs -> exit 3, difference -1
    gate.write_text(json.dumps(_gate_json(strict=62)), encoding="utf-8")
    assert run_cli(["vs-published", str(path), "--spec", str(spec), "--gate", str(gate)]) == 3
    captured = capsys.readouterr()
    line = rows_of_spec(captured.out, spec)["gate: strict agreement"]
    assert "62/64" in line and "-1" in line and "MISMATCH (count)" in line
    assert "gate: strict agreement" in captured.err


def rows_of_spec(out: str, spec: Path) -> dict[str, str]:
    names = [f.name for f in load_published(spec).figures]
    return {n: next(line for line in out.splitlines() if line.startswith(n + " "))
            for n in names}


def test_a_changed_prediction_and_a_missing_variant_fail(tmp_path: Path) -> None:
    spec = _q8_figures_only(tmp_path)
    rows = q8_rows()
    flip = next(r for r in rows if r["variant"] == "marker_paraphrase" and r["score"] == 0)
    flip["score"] = 1  # one more marker flip: 4/64 instead of 3/64
    path = write_predictions(tmp_path / "a.jsonl", rows)
    assert run_cli(["vs-published", str(path), "--spec", str(spec)]) == 3
    no_combined = [r for r in q8_rows() if r["variant"] != "combined"]
    path = write_predictions(tmp_path / "b.jsonl", no_combined)
    from guardrepro.checks.io.predictions import load_rows
    from guardrepro.checks.stats.compute import compute_stats

    stats = compute_stats(load_rows(path).rows, replicates=10).to_dict()
    result = compare(load_published(spec), {"stats": stats, "gate": None, "audit": None})
    status = {r.figure.name: r.status for r in result.rows}
    assert status["strict accuracy: combined"] == "missing"
    assert status["strict accuracy: original"] == "match"
    assert {r.figure.name for r in result.failed} >= {"strict accuracy: combined",
                                                       "flips: combined (all_pairs, unstratified)"}


def test_the_capped_row_is_reported_as_truncated(tmp_path: Path) -> None:
    """The published run's one invalid row hit the 2,048-token cap: a run's
    stats count it under ``truncated`` (match); a predictions file has no
    status, so the reported figure is missing and nothing fails; coverage is
    255/256 either way."""
    from guardrepro.checks.io.predictions import load_rows
    from guardrepro.checks.stats.compute import compute_stats

    stats = compute_stats(load_rows(write_predictions(tmp_path / "p.jsonl")).rows,
                          replicates=10).to_dict()
    spec = load_published(SPEC)
    rows = {r.figure.name: r for r in compare(spec, {"stats": stats, "gate": None,
                                                     "audit": None}).rows}
    assert rows["rows truncated at max_new_tokens"].status == "missing"
    assert not rows["rows truncated at max_new_tokens"].fails
    assert rows["parser coverage, all rows"].status == "match"
    # the same statistics as a run would write them: the invalid row truncated
    as_run = {**stats, "rows": {**stats["rows"], "by_status": {"ok": 255, "truncated": 1}}}
    rows = {r.figure.name: r for r in compare(spec, {"stats": as_run, "gate": None,
                                                     "audit": None}).rows}
    assert rows["rows truncated at max_new_tokens"].status == "match"
    assert rows["parser coverage, all rows"].status == "match"


def test_reported_figures_never_fail(tmp_path: Path) -> None:
    spec = tmp_path / "r.toml"
    spec.write_text('name = "r"\n[[figure]]\nname = "acc"\nsource = "stats"\n'
                    'path = "variants.original.strict_accuracy"\ncount = 60\n'
                    'match = "reported"\n', encoding="utf-8")
    path = write_predictions(tmp_path / "p.jsonl")
    assert run_cli(["vs-published", str(path), "--spec", str(spec)]) == 0


@pytest.mark.parametrize(("body", "field"), [
    ('name = "x"\ncolour = 1\n[[figure]]\nname = "a"\nsource = "stats"\npath = "p"\ncount = 1\n',
     "colour"),
    ('name = "x"\n[[figure]]\nname = "a"\nsource = "stats"\npath = "p"\ncount = 1\nhue = 2\n',
     "figure[0].hue"),
    ('name = "x"\n[[figure]]\nname = "a"\nsource = "web"\npath = "p"\ncount = 1\n',
     "figure[0].source"),
    ('name = "x"\n[[figure]]\nname = "a"\nsource = "stats"\npath = "p"\ncount = 1.5\n',
     "figure[0].count"),
    ('name = "x"\n[[figure]]\nname = "a"\nsource = "stats"\npath = "p"\n', "figure[0].name"),
    ('name = "x"\n[[figure]]\nsource = "stats"\npath = "p"\ncount = 1\n', "figure[0].name"),
])
def test_spec_is_read_strictly(tmp_path: Path, body: str, field: str,
                               capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "bad.toml"
    spec.write_text(body, encoding="utf-8")
    with pytest.raises(InputError) as exc:
        load_published(spec)
    assert exc.value.field == field and exc.value.file == str(spec)
    path = write_predictions(tmp_path / "p.jsonl")
    assert run_cli(["vs-published", str(path), "--spec", str(spec)]) == 2
    err = capsys.readouterr().err
    assert str(spec) in err and field in err


def test_shipped_spec_is_valid() -> None:
    spec = load_published(SPEC)
    assert spec.name == "ts-guard-q8"
    names = [f.name for f in spec.figures]
    assert len(names) == len(set(names))
