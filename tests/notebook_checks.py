"""Checks of the data behind the notebooks' figures, shared by the notebook
tests (a hand-made run) and the demo test (the demo's run).

A notebook is executed with one cell appended (``dump_cell``) that saves its
DataFrames as JSON; the data of every figure (``flip_data``, ``domain_data``,
``margin_data``, ``confusion``) is then compared with figures recomputed here
from the run's raw record lines and the gate reference's (plain JSON, no
guardrepro code).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


def dump_cell(dump: Path) -> str:
    """Source of a cell saving every public DataFrame (and ``directions``) as JSON."""
    return (
        f"from pathlib import Path as _P\n_d = _P({str(dump)!r}); _d.mkdir()\n"
        "for _n, _v in list(globals().items()):\n"
        "    if type(_v).__name__ == 'DataFrame' and not _n.startswith('_'):\n"
        "        _v.reset_index().to_json(_d / f'{_n}.json', orient='records',\n"
        "                                 double_precision=15)\n"
        "if 'directions' in globals():\n"
        "    import json as _j; (_d / 'directions.json').write_text(_j.dumps(directions))\n")


def read_frames(dump: Path) -> dict[str, Any]:
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in dump.glob("*.json")}


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _decision(r: dict[str, Any]) -> int:
    """Strict decision, fail-closed: anything but a valid 0 score blocks."""
    return 0 if r["status"] == "ok" and r["score"] == 0 else 1


def _flip_expectations(run: Path) -> tuple[dict[tuple[str, str], tuple[int, int]],
                                           dict[tuple[str, str], tuple[int, int]]]:
    """((edit, view) -> (flips, pairs), (edit, domain) -> (flips, pairs), all
    pairs) from the records: an edit row is paired with its base's original."""
    records = _lines(run / "records.jsonl")
    originals = {r["base_sample_id"]: r for r in records if r["variant"] == "original"}
    views: dict[tuple[str, str], list[int]] = {}
    domains: dict[tuple[str, str], list[int]] = {}
    for r in records:
        o = originals.get(r["base_sample_id"])
        if r["variant"] == "original" or o is None:
            continue
        flip = int(_decision(r) != _decision(o))
        for key, into in (((r["variant"], "all_pairs"), views),
                          ((r["variant"], r["domain"]), domains)):
            into.setdefault(key, []).append(flip)
        if r["status"] == "ok" and o["status"] == "ok":
            views.setdefault((r["variant"], "valid_both_only"), []).append(flip)
    return ({k: (sum(v), len(v)) for k, v in views.items()},
            {k: (sum(v), len(v)) for k, v in domains.items()})


def _score_label(r: dict[str, Any] | None) -> str:
    if r is None:
        return "missing"
    return "invalid" if r["status"] != "ok" else str(float(r["score"]))


def _gate_expectations(run: Path) -> tuple[dict[tuple[str, str], int], dict[str, list[float]]]:
    """((reference label, local label) -> rows, group -> sorted margins) over
    the reference's original rows, from the records of both runs."""
    gate = json.loads((run / "gate.json").read_text(encoding="utf-8"))
    assert gate["reference"]["type"] == "records"
    ref = {r["row_id"]: r for r in _lines(Path(gate["reference"]["path"]))
           if r["variant"] == "original"}
    local = {r["row_id"]: r for r in _lines(run / "records.jsonl")}
    cells: dict[tuple[str, str], int] = {}
    margins: dict[str, list[float]] = {}
    for rid, rr in ref.items():
        lr = local.get(rid)
        key = (_score_label(rr), _score_label(lr))
        cells[key] = cells.get(key, 0) + 1
        if lr is None or lr["decision_margin"] is None:
            continue
        agree = lr["status"] == "ok" and rr["status"] == "ok" and _decision(lr) == _decision(rr)
        neither = lr["status"] != "ok" and rr["status"] != "ok"
        group = ("agrees with reference" if agree else "invalid on both sides" if neither
                 else "disagrees with reference")
        margins.setdefault(group, []).append(lr["decision_margin"])
    return cells, {g: sorted(m) for g, m in margins.items()}


def check_flip_figures(run_dir: Path, frames: dict[str, Any]) -> None:
    """The flip and margin figures' data agree with the records."""
    by_view, by_domain = _flip_expectations(run_dir)
    bars = {(r["edit"], r["view"]): r for r in frames["flip_data"]}
    assert {k: (b["count"], b["denominator"]) for k, b in bars.items()} == by_view
    for b in bars.values():
        if b["denominator"]:
            assert b["point"] == pytest.approx(b["count"] / b["denominator"])
            assert b["lower"] <= b["point"] <= b["upper"]
    assert {(r["edit"], r["domain"]): (r["count"], r["denominator"])
            for r in frames["domain_data"]} == by_domain
    if (run_dir / "gate.json").is_file():
        _, margins = _gate_expectations(run_dir)
        shown: dict[str, list[float]] = {}
        for r in frames["margin_data"]:
            shown.setdefault(r["group"], []).append(r["margin"])
        assert set(shown) == set(margins)
        for group, values in margins.items():  # JSON keeps 15 significant digits
            assert sorted(shown[group]) == pytest.approx(values, rel=1e-12)


def confusion_cells(frames: dict[str, Any]) -> dict[tuple[str, str], int]:
    """The non-empty cells of the parity notebook's ``confusion`` DataFrame."""
    return {(r["reference score"], col): n for r in frames["confusion"]
            for col, n in r.items() if col != "reference score" and n}


def check_confusion(run_dir: Path, frames: dict[str, Any]) -> None:
    """The score-confusion figure's data agrees with the records of both runs."""
    cells, _ = _gate_expectations(run_dir)
    assert confusion_cells(frames) == cells
