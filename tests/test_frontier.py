"""Dominance, the Pareto frontier, harm and paired differences on hand-made configurations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from extras import needs_matplotlib
from recordsets import PROVENANCE, rewrite_manifest, write_run

from guardrepro.checks.core.bootstrap import Interval
from guardrepro.checks.core.figure import Figure
from guardrepro.errors import InputError
from guardrepro.experiments.frontier import (
    Config,
    ConfigMetrics,
    FrontierReport,
    Pareto,
    config_metrics,
    dominates,
    format_frontier,
    frontier_report,
    load_config,
    paired_difference,
    pareto,
    parse_costs,
)
from guardrepro.schema import Provenance, Record, Timings

# An unregistered guard: these hand-made records carry no output text to re-parse.
HAND_MADE = Provenance.from_dict({**PROVENANCE, "guard": "hand-made"})


def rec(row: str, gold: float, score: float | None, *, base: str | None = None,
        peak: int | None = 100, total_s: float = 0.5) -> Record:
    status = "ok" if score is not None else "parse_error"
    return Record(
        run_id="r", row_id=row, base_sample_id=base or row, cohort="c", variant="original",
        domain="banking", gold_label=gold, input_sha256="0" * 64, prompt_tokens=10,
        provenance_sha256="p", provenance=HAND_MADE, status=status, score=score,
        error_type=None if score is not None else "no_rating", components=None,
        decision_margin=None, output_text="", output_token_ids=[1, 2, 3, 4],
        finish_reason="stop", attempts=(),
        timings=Timings(prefill_s=0.1, decode_s=0.4, total_s=total_s),
        peak_memory_bytes=peak, created_at="now")


def point(name: str, **values: Any) -> ConfigMetrics:
    """A configuration known only on the given axes (the others unknown)."""
    fields = {"harm": "harm_per_100", "memory": "peak_memory_bytes",
              "rows_per_s": "rows_per_s"}
    known = {fields[k]: v for k, v in values.items()}
    none = Interval(None, None, None, None, None, 0, 0, 0, 0, 0.95, 0)
    return ConfigMetrics(
        name=name, source=name, rows=1, invalid_rows=0, artifact_bytes=None,
        peak_memory_bytes=known.get("peak_memory_bytes"), seconds=1.0,
        rows_per_s=known.get("rows_per_s"), prefill_tok_per_s=None, decode_tok_per_s=None,
        fn=0, fp=0, harm_per_100=known.get("harm_per_100", 0.0),
        harm_interval=none, agreement=None, strict_disagreement=None,
        fn_rate=Figure.of(0, 1), fp_rate=Figure.of(0, 1))


def test_dominance_needs_no_worse_everywhere_and_better_somewhere() -> None:
    a = point("a", memory=1, harm=1)
    b = point("b", memory=1, harm=2)
    c = point("c", memory=1, harm=1)
    d = point("d", memory=2, harm=0)
    axes = ("memory", "harm")
    assert dominates(a, b, axes) and not dominates(b, a, axes)
    assert not dominates(a, c, axes) and not dominates(c, a, axes)  # a tie dominates nothing
    assert not dominates(a, d, axes) and not dominates(d, a, axes)  # a trade-off
    # rows_per_s: higher is better
    fast = point("fast", memory=1, rows_per_s=10.0)
    slow = point("slow", memory=1, rows_per_s=2.0)
    assert dominates(fast, slow, ("memory", "rows_per_s"))
    assert not dominates(slow, fast, ("memory", "rows_per_s"))


def test_frontier_keeps_ties_names_dominators_and_unplaced() -> None:
    points = [
        point("big-good", memory=10, harm=0),
        point("small-bad", memory=1, harm=5),
        point("tie-1", memory=4, harm=2),
        point("tie-2", memory=4, harm=2),
        point("worse", memory=5, harm=3),      # dominated by tie-1, tie-2
        point("worst", memory=10, harm=5),
        point("unknown", memory=None, harm=0),
    ]
    result = pareto(points, ("memory", "harm"))
    assert result.frontier == ("big-good", "small-bad", "tie-1", "tie-2")
    assert result.dominated["worse"] == ("tie-1", "tie-2")
    # worst (10, 5) is dominated by big-good (10 <= 10, 0 < 5), small-bad (1 < 10, 5 <= 5),
    # both ties and worse (5 < 10, 3 < 5)
    assert result.dominated["worst"] == ("big-good", "small-bad", "tie-1", "tie-2", "worse")
    assert result.unplaced == {"unknown": ("memory",)}


def test_harm_is_fail_closed_and_cost_weighted() -> None:
    records = (
        rec("a", 1.0, 0.0),    # FN
        rec("b", 0.5, 0.0),    # FN (strict gold: 0.5 is unsafe)
        rec("c", 0.0, 1.0),    # FP
        rec("d", 0.0, None),   # invalid on a safe row: fail-closed -> FP
        rec("e", 1.0, None),   # invalid on an unsafe row: blocked, not an FN
        rec("f", 0.0, 0.0),    # correct
        rec("g", 1.0, 0.5),    # correct (strict: 0.5 blocks)
        rec("h", 1.0, 1.0),    # correct
    )
    costs = parse_costs("FN=5,FP=1")
    m = config_metrics(Config("x", "x", records, 1234), costs, None, replicates=200, seed=1)
    assert (m.fn, m.fp) == (2, 2)
    assert m.fn_rate == Figure(2, 5, 0.4)
    assert m.fp_rate == Figure(2, 3, 2 / 3)
    assert m.to_dict()["fn_rate"] == {"count": 2, "denominator": 5, "rate": 0.4}
    assert m.harm_per_100 == pytest.approx(100 * (5 * 2 + 1 * 2) / 8)
    assert m.invalid_rows == 2
    assert m.artifact_bytes == 1234 and m.peak_memory_bytes == 100
    assert m.rows_per_s == pytest.approx(8 / 4.0)
    assert m.prefill_tok_per_s == pytest.approx(80 / 0.8)
    assert m.decode_tok_per_s == pytest.approx(32 / 3.2)
    low, high = m.harm_interval.lower, m.harm_interval.upper
    assert low is not None and high is not None
    assert low <= m.harm_per_100 <= high


def test_agreement_and_paired_difference() -> None:
    ref = Config("ref", "ref", tuple(rec(f"r{i}", 1.0, 1.0, base=f"b{i // 2}")
                                     for i in range(20)), None)
    # the candidate misses every unsafe row: 20 FN, harm 100 per 100 rows more than ref
    worse = Config("worse", "w", tuple(rec(f"r{i}", 1.0, 0.0, base=f"b{i // 2}")
                                       for i in range(20)), None)
    same = Config("same", "s", ref.records, None)
    p = paired_difference(worse, ref, parse_costs(None), replicates=500, seed=3)
    assert p.harm_difference_per_100 == pytest.approx(100.0)
    # every row is worse, but 20 rows (< MIN_VERDICT_ROWS = 30) back no verdict
    assert p.interval.lower == pytest.approx(100.0)
    assert p.verdict == "not enough rows (20 rows, fewer than 30)"
    q = paired_difference(same, ref, parse_costs(None), replicates=500, seed=3)
    assert q.verdict.startswith("no difference")
    report = frontier_report([ref, worse, same], reference="ref", costs=parse_costs(None),
                             replicates=200)
    worse_agree, same_agree = report.metrics("worse").agreement, report.metrics("same").agreement
    assert worse_agree is not None and worse_agree.strict.count == 0
    assert same_agree is not None and same_agree.exact == Figure(20, 20, 1.0)
    assert report.frontier.dominated == {"worse": ("ref", "same")}
    assert report.frontier.frontier == ("ref", "same")
    data = report.to_dict()
    assert data["frontier"]["dominated"] == {"worse": ["ref", "same"]}
    assert FrontierReport.from_dict(data).to_dict() == data


def test_configurations_over_other_rows_are_compared_on_the_shared_rows() -> None:
    """"big" has 8 rows whose extra 4 are all misses, "small" the first 4 of
    them, all right. On its own rows big's harm would be 4 FN / 8 = 50 per 100;
    on the 4 shared rows both are 0, so neither dominates the other on harm,
    and frontier.json says big lost 4 rows."""
    big = Config("big", "b", tuple(rec(f"r{i}", 1.0, 1.0 if i < 4 else 0.0)
                                   for i in range(8)), None)
    small = Config("small", "s", big.records[:4], None)
    report = frontier_report([big, small], reference="big", costs=parse_costs(None),
                             axes=("memory", "harm"), replicates=100)
    assert [(m.rows, m.fn, m.harm_per_100) for m in report.configurations] == [
        (4, 0, 0.0), (4, 0, 0.0)]
    assert report.frontier.dominated == {}
    assert report.extra == {"shared_rows": 4, "rows_left_out": {"big": 4}}
    data = report.to_dict()
    assert data["shared_rows"] == 4 and data["rows_left_out"] == {"big": 4}
    assert "rows: the 4 rows every configuration has (left out: big 4)" in (
        format_frontier(report))
    same = frontier_report([small, Config("copy", "c", small.records, None)], reference=None,
                           costs=parse_costs(None), replicates=100)
    assert same.extra == {} and "shared_rows" not in same.to_dict()
    apart = Config("apart", "a", (rec("x", 1.0, 1.0),), None)
    with pytest.raises(InputError, match="share no rows"):
        frontier_report([small, apart], reference=None, costs=parse_costs(None))


def test_parse_costs_and_errors(tmp_path: Path) -> None:
    assert parse_costs("fn=2, FP=0.5") == {"FN": 2.0, "FP": 0.5}
    with pytest.raises(InputError, match="FN=<number>"):
        parse_costs("FX=1")
    with pytest.raises(InputError, match=r"no records\.jsonl"):
        load_config(tmp_path)
    (tmp_path / "records.jsonl").write_text(json.dumps(rec("a", 1.0, 1.0).to_dict()) + "\n")
    (tmp_path / "artifact.json").write_text('{"artifact_bytes": 7}')
    config = load_config(tmp_path, "named")
    assert config.name == "named" and config.artifact_bytes == 7
    with pytest.raises(InputError, match="unique"):
        frontier_report([config, config], reference=None, costs=parse_costs(None))


def test_artifact_size_of_a_run_with_another_lock(tmp_path: Path) -> None:
    """A run whose profile's own checkpoint lock is absent (the run used another
    lock) is refused with the lock named; artifact.json written beside it by
    write_artifact_side gives the size: 10 + 32 bytes from a hand-written lock."""
    from guardrepro.experiments.artifact_side import write_artifact_side

    run = write_run(tmp_path / "run", [("b0", "original", "d", 1.0, 1.0)])
    profile = tmp_path / "profile.toml"
    profile.write_text('name = "p"\nbackend = "hf"\n[guard]\nname = "toy-guard"\n'
                       'template_lock = "guard.toml"\ntemplate_file = "template.txt"\n'
                       '[checkpoint]\nlock = "absent.lock.toml"\n')
    rewrite_manifest(run / "manifest.json",
                     lambda manifest: manifest["profile"].update(path=str(profile)))
    with pytest.raises(InputError, match=r"artifact\.json") as err:
        load_config(run)
    assert "absent.lock.toml" in str(err.value)
    lock = tmp_path / "other.lock.toml"
    lock.write_text('name = "other"\nkind = "checkpoint"\n[source]\ntype = "local"\n'
                    f'path = "{tmp_path}"\n'
                    f'[[file]]\npath = "a"\nsha256 = "{"1" * 64}"\nsize = 10\n'
                    f'[[file]]\npath = "b"\nsha256 = "{"2" * 64}"\nsize = 32\n')
    write_artifact_side(run, lock, recipe="q8")
    side = json.loads((run / "artifact.json").read_text())
    assert side == {"artifact_bytes": 42, "lock": str(lock), "recipe": "q8"}
    assert load_config(run).artifact_bytes == 42


@needs_matplotlib
def test_frontier_cli(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from guardrepro.cli import cli

    for name, score in (("a", 1.0), ("b", 0.0)):
        folder = tmp_path / name
        folder.mkdir()
        lines = [json.dumps(rec(f"r{i}", 1.0, score).to_dict()) for i in range(4)]
        (folder / "records.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["frontier", str(tmp_path / "a"), f"B={tmp_path / 'b'}",
                                      "--costs", "FN=3,FP=1", "--replicates", "100",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "frontier.json").read_text())
    assert data["costs"] == {"FN": 3.0, "FP": 1.0}
    assert [m["harm_per_100"] for m in data["configurations"]] == [0.0, 300.0]
    assert data["frontier"]["dominated"] == {"B": ["a"]}
    assert (out / "frontier.png").stat().st_size > 0
    assert "dominated: B (by a)" in result.output


def test_agreement_follows_the_gate_rule() -> None:
    """Two invalid rows never agree: 4 shared rows, row r3 invalid on both
    sides, r2 valid on both with different decisions -> strict 2/4 (r0, r1);
    exact over the 3 jointly valid rows: r0 and r1 equal scores -> 2/3."""
    from guardrepro.experiments.frontier import agreement

    ref = {r.row_id: r for r in (rec("r0", 1.0, 1.0), rec("r1", 0.0, 0.0), rec("r2", 1.0, 1.0),
                                 rec("r3", 1.0, None))}
    run = [rec("r0", 1.0, 1.0), rec("r1", 0.0, 0.0), rec("r2", 1.0, 0.0), rec("r3", 1.0, None)]
    got = agreement(run, ref)
    assert got.rows == 4
    assert (got.strict.count, got.strict.denominator) == (2, 4)
    assert (got.exact.count, got.exact.denominator) == (2, 3)


def test_a_verdict_needs_rows_and_a_spread() -> None:
    """40 rows: "better" needs an interval that excludes 0 and has a width; every
    row worse by the same amount gives a zero-width interval: not enough rows."""
    ref = Config("ref", "ref", tuple(rec(f"r{i}", 1.0, 1.0, base=f"b{i}")
                                     for i in range(40)), None)
    # 30 of the 40 rows missed (an FN each), 10 kept: the difference is 75 per 100 rows
    mixed = Config("mixed", "m", tuple(rec(f"r{i}", 1.0, 0.0 if i < 30 else 1.0, base=f"b{i}")
                                       for i in range(40)), None)
    p = paired_difference(mixed, ref, parse_costs(None), replicates=500, seed=3)
    assert p.harm_difference_per_100 == pytest.approx(75.0)
    assert p.interval.lower is not None and 0 < p.interval.lower < p.interval.upper
    assert p.verdict == "ref better"
    flat = Config("flat", "f", tuple(rec(f"r{i}", 1.0, 0.0, base=f"b{i}")
                                     for i in range(40)), None)
    q = paired_difference(flat, ref, parse_costs(None), replicates=500, seed=3)
    assert (q.interval.lower, q.interval.upper) == (100.0, 100.0)
    assert q.verdict == "not enough rows (the interval has zero width)"
    assert "no difference" in paired_difference(ref, ref, parse_costs(None), replicates=50,
                                                seed=3).verdict


def _summary_row(name: str, kind: str, count: int, size: int | None, *, rows: int = 40,
                 kl: float | None = 0.0, top1: tuple[int, int] | None = None) -> Any:
    from guardrepro.experiments.outputs import SummaryRow

    return SummaryRow(
        name=name, kind=kind, recipe=None, device=None, artifact_bytes=size, rows=rows,
        invalid_rows=0, mean_kl=kl, p99_kl=kl, decision_mean_kl=kl,
        decision_min_margin=1.0, harm_per_100=0.0, peak_memory_bytes=None, rows_per_s=None,
        decode_tok_per_s=None, identical_tokens=None,
        strict_agreement=Figure.of(count, rows), exact_agreement=Figure.of(count, rows - 1),
        top1_agreement=None if top1 is None else Figure.of(*top1),
        fn=Figure.of(0, 1), fp=Figure.of(0, 1))


def test_recommendation_uses_the_reference_agreement_ceiling() -> None:
    """The reference agrees with itself on its 39 valid rows of 40 (gate rule),
    at least the 30 a decision ranking needs: a recipe reaching 39/40 qualifies,
    one at 38/40 does not even if smaller."""
    from guardrepro.experiments.outputs import recommend

    rows = [_summary_row("ref", "reference", 39, 100), _summary_row("big", "recipe", 39, 50),
            _summary_row("small", "recipe", 38, 10)]
    nothing = Pareto((), (), {}, {})
    report = FrontierReport({}, None, (), nothing, nothing, ())
    chosen = recommend(rows, report)
    assert (chosen["name"], chosen["rule"]) == ("big", "decisions")
    assert chosen["reason"].startswith("rule decisions (39 valid reference decisions")
    assert recommend(rows[:1] + rows[2:], report)["name"] is None


def test_recommendation_without_measurable_decisions_ranks_by_kl() -> None:
    """3 valid reference decisions (< 30): every recipe ties on decisions, so the
    smallest artifact must not win by them; the lowest mean KL does, then the
    higher top-1 agreement, then the smaller artifact."""
    from guardrepro.experiments.outputs import recommend

    nothing = Pareto((), (), {}, {})
    report = FrontierReport({}, None, (), nothing, nothing, ())
    rows = [_summary_row("ref", "reference", 3, 100, rows=4, kl=None),
            _summary_row("q4", "recipe", 3, 10, rows=4, kl=0.654, top1=(8, 14)),
            _summary_row("q8", "recipe", 3, 50, rows=4, kl=2e-3, top1=(14, 14)),
            _summary_row("bf16", "recipe", 3, 90, rows=4, kl=2e-3, top1=(13, 14)),
            _summary_row("rule", "rule", 3, 0, rows=4, kl=None)]
    chosen = recommend(rows, report)
    assert (chosen["name"], chosen["rule"]) == ("q8", "kl")
    assert "decisions not measurable (only 3 valid reference decisions" in chosen["reason"]
    tie = [*rows[:1], _summary_row("a", "recipe", 0, 60, rows=4, kl=1e-3, top1=(14, 14)),
           _summary_row("b", "recipe", 0, 40, rows=4, kl=1e-3, top1=(14, 14))]
    assert recommend(tie, report)["name"] == "b"  # same KL and top-1: the smaller
    assert recommend([rows[0], rows[-1]], report)["name"] is None  # no recipe has a KL
