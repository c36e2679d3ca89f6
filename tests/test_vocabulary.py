"""One vocabulary: disagreement, flip and agreement mean the same thing in the
gate, attribute, compare, guard-table, stats and the report, and every figure
that has two views names its view.

The toy run below is built by hand; every expected count is computed here from
the score lists with the definitions of docs/PROTOCOL.md (a row agrees under
the gate's rule only when both sides are valid and their strict decisions are
equal; a flip compares fail-closed decisions in ``all_pairs`` and only pairs
valid on both sides in ``valid_both_only``), not read from the code under test.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from guardrepro.checks.report.markdown import FIGURES_NOTE
from guardrepro.cli import main
from tests.recordsets import grid, row_id, write_run

BASES = [(f"b{i}", "banking" if i % 2 else "slack", float(i % 2 == 0)) for i in range(1, 9)]
REFERENCE = {"original": [0, 1, 0, 1, "parse", 1, 0, 1]}
LOCAL = {"original": [0, 1, 1, "parse", "parse", 1, 0, 0],
         "combined": [1, 1, 1, 0, 0, "parse", 0, 1]}


def _valid(score: Any) -> bool:
    return isinstance(score, (int, float))


def _decision(score: Any) -> int:
    return 1 if not _valid(score) or score != 0 else 0  # fail closed


def _expected() -> dict[str, Any]:
    ref, loc, edit = REFERENCE["original"], LOCAL["original"], LOCAL["combined"]
    bases = [b for b, _, _ in BASES]
    disagree = [b for b, r, x in zip(bases, ref, loc, strict=True)
                if not (_valid(r) and _valid(x) and _decision(r) == _decision(x))]
    flips_all = sum(_decision(o) != _decision(e) for o, e in zip(loc, edit, strict=True))
    both = [(o, e) for o, e in zip(loc, edit, strict=True) if _valid(o) and _valid(e)]
    flips_valid = sum(_decision(o) != _decision(e) for o, e in both)
    return {"disagree": [row_id(b, "original") for b in disagree], "rows": len(bases),
            "flips_all": (flips_all, len(loc)), "flips_valid": (flips_valid, len(both))}


@pytest.fixture()
def toy(tmp_path: Path) -> dict[str, Path]:
    ref = write_run(tmp_path / "ref", grid(BASES, REFERENCE), run_id="ref")
    run = write_run(tmp_path / "run", grid(BASES, LOCAL))
    spec = tmp_path / "checks" / "gate.toml"
    spec.parent.mkdir()
    spec.write_text('name = "vocab"\nrows = "originals"\n[reference]\ntype = "records"\n'
                    'path = "../ref/records.jsonl"\n[thresholds]\nexpected_rows = 8\n'
                    "min_coverage = 0.0\nmin_strict_agreement = 0.0\n"
                    "min_strict_agreement_gold_safe = 0.0\n"
                    "min_strict_agreement_gold_unsafe = 0.0\n[bootstrap]\nreplicates = 200\n",
                    encoding="utf-8")
    return {"ref": ref, "run": run, "spec": spec}


def _json(args: list[str], capsys: pytest.CaptureFixture[str]) -> Any:
    capsys.readouterr()
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_disagreement_is_one_count(toy: dict[str, Path],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    want = _expected()
    assert len(want["disagree"]) == 4  # the hand case: one of each kind, plus a decision
    assert main(["gate", str(toy["run"]), "--spec", str(toy["spec"])]) == 0
    gate = json.loads((toy["run"] / "gate.json").read_text())
    assert [d["row_id"] for d in gate["disagreements"]] == want["disagree"]
    reasons = {d["row_id"]: d["reason"] for d in gate["disagreements"]}
    att = _json(["attribute", "--reference", str(toy["spec"]), "--bf16", str(toy["run"]),
                 "--replicates", "50"], capsys)
    (run,) = att["runs"]
    strict = {r["row_id"]: r["reason"] for r in run["rows"] if r["level"] == "strict"}
    assert strict == reasons
    counts = run["counts"]["strict"]["disagreements"]
    assert (counts["count"], counts["denominator"]) == (len(want["disagree"]), want["rows"])
    assert att["settings"]["level_rules"]["strict"].startswith("gate_rule")
    cmp = _json(["compare", str(toy["run"]), str(toy["ref"]), "--shared-rows"], capsys)
    assert sorted(cmp["summary"]["strict_disagreements"]) == sorted(want["disagree"])
    agree = cmp["summary"]["strict_agreement"]
    assert (agree["count"], agree["denominator"]) == (want["rows"] - 4, want["rows"])


def test_flips_name_their_view_and_agree(toy: dict[str, Path],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    want = _expected()
    assert main(["stats", str(toy["run"]), "--replicates", "200"]) == 0
    stats = json.loads((toy["run"] / "stats.json").read_text())["edits"]["combined"]
    table = _json(["guard-table", str(toy["run"]), "--replicates", "200",
                   "--no-progress"], capsys)
    from guardrepro.checks.report.guard_table import GuardTable

    assert GuardTable.from_dict(table).to_dict() == table  # the document reads back
    column = next(iter(table["guards"].values()))
    for view, key in (("all_pairs", "flips_all"), ("valid_both_only", "flips_valid")):
        fig = column["flip_views"][view]["combined"]
        st = stats[view]["flip_rate"]
        assert fig["view"] == view
        assert (fig["numerator"], fig["denominator"]) == want[key]
        assert (st["count"], st["denominator"]) == want[key]
        # the same engine, seed and replicates: the same interval
        assert (fig["interval"]["lower"], fig["interval"]["upper"]) == (st["lower"], st["upper"])
    assert column["flips"]["combined"]["view"] == "valid_both_only"
    capsys.readouterr()
    assert main(["guard-table", str(toy["run"]), "--replicates", "200", "--no-progress"]) == 0
    out = capsys.readouterr().out
    a, v = want["flips_all"], want["flips_valid"]
    assert f"| flip rate: combined (all_pairs) | {a[0] / a[1]:.2f} ({a[0]}/{a[1]})" in out
    assert f"| flip rate: combined (valid_both_only) | {v[0] / v[1]:.2f} ({v[0]}/{v[1]})" in out


def test_report_sections(toy: dict[str, Path]) -> None:
    want = _expected()
    assert main(["gate", str(toy["run"]), "--spec", str(toy["spec"])]) == 0
    assert main(["report", str(toy["run"]), "--html", "--replicates", "200",
                 "--no-progress"]) == 0
    text = (toy["run"] / "report.md").read_text()
    assert text.count("## Parity gate") == 1
    summary, full = text.index("## Flips per edit"), text.index("### Paired statistics")
    assert summary < full
    row = next(line for line in text[summary:full].splitlines()
               if line.startswith("| combined |"))
    a, v = want["flips_all"], want["flips_valid"]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == f"{a[0]}/{a[1]}" and cells[2].endswith(f"n = {a[1]}")
    assert cells[3] == f"{v[0]}/{v[1]}" and cells[4].endswith(f"n = {v[1]}")
    assert "[" in cells[2] and "[" in cells[4]  # each with its interval
    # directions (all_pairs): originals decided 0 that went to 1, and 1 to 0
    pairs = [(_decision(o), _decision(e))
             for o, e in zip(LOCAL["original"], LOCAL["combined"], strict=True)]
    s2u = (sum(p == (0, 1) for p in pairs), sum(p[0] == 0 for p in pairs))
    u2s = (sum(p == (1, 0) for p in pairs), sum(p[0] == 1 for p in pairs))
    assert cells[5:] == [f"{s2u[0]}/{s2u[1]}", f"{u2s[0]}/{u2s[1]}"]
    html = (toy["run"] / "report.html").read_text()
    assert html.count(">Parity gate</h2>") == 1
    if importlib.util.find_spec("matplotlib") is None:  # no report extra: no figures, said so
        assert FIGURES_NOTE in text and "![" not in text
        return
    for png in ("flip_rates.png", "score_confusion.png", "margin_hist.png"):
        at = text.index(f"![{png}]({png})")
        caption = text[at:].splitlines()[2]
        assert caption.startswith("*") and len(caption) > 60
    assert html.count("<figcaption>") == 3 and "flips/pairs" in html


def test_first_line_says_what_the_sides_are(toy: dict[str, Path],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    # both runs: guard toy-guard, tree 0 * 64 (tests/recordsets.PROVENANCE), and
    # each its own cohort file (different rows), so only the cohort differs
    capsys.readouterr()
    assert main(["compare", str(toy["run"]), str(toy["ref"]), "--shared-rows"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("the sides differ in cohort (A ")
    assert first.endswith("same guard toy-guard, checkpoint 000000000000")
    cmp = _json(["compare", str(toy["run"]), str(toy["ref"]), "--shared-rows"], capsys)
    assert cmp["sides"]["differ"] == ["cohort"] and cmp["sides"]["unknown"] == []
    # the published Q8 run is another guard, checkpoint and cohort
    main(["vs-published", str(toy["run"]), "--no-progress"])
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("the sides differ in guard (run toy-guard, ts-guard-q8 ts-guard), "
                            "checkpoint (run 000000000000, ts-guard-q8 913afe8cc195), cohort")
