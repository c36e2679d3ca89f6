"""``guardrepro stats`` on a predictions file: the published Q8 point figures
from rows solved by hand (``q8rows``), the intervals recomputed by the
independent loop with the stratification each one is assigned, and strict
reading of the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bootref import Row, reference_interval
from q8rows import q8_rows, write_predictions

from guardrepro.checks.io.predictions import load_rows
from guardrepro.checks.stats.compute import compute_stats
from guardrepro.cli import main

REPLICATES = 1100


@pytest.fixture(scope="module")
def q8(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = write_predictions(tmp_path_factory.mktemp("q8") / "preds.jsonl")
    return compute_stats(load_rows(path).rows, replicates=REPLICATES).to_dict()


def cd(s: dict[str, Any]) -> tuple[int, int]:
    return s["count"], s["denominator"]


def test_published_accuracy_and_coverage(q8: dict[str, Any]) -> None:
    published = {"original": (61, 0.953125), "marker_paraphrase": (58, 0.90625),
                 "tool_alias": (57, 0.890625), "combined": (57, 0.890625)}
    for variant, (count, point) in published.items():
        acc = q8["variants"][variant]["strict_accuracy"]
        assert (acc["count"], acc["denominator"], acc["point"]) == (count, 64, point)
    cov = q8["rows"]["coverage"]
    assert (cov["numerator"], cov["denominator"]) == (255, 256)


def test_published_flips(q8: dict[str, Any]) -> None:
    e = q8["edits"]
    assert cd(e["marker_paraphrase"]["all_pairs"]["flip_rate"]) == (3, 64)
    assert cd(e["marker_paraphrase"]["valid_both_only"]["flip_rate"]) == (3, 64)
    assert cd(e["tool_alias"]["all_pairs"]["flip_rate"]) == (4, 64)
    assert cd(e["tool_alias"]["valid_both_only"]["flip_rate"]) == (3, 63)
    assert e["tool_alias"]["valid_both_only"]["flip_rate"]["point"] == 3 / 63
    combined = e["combined"]
    for view in ("all_pairs", "valid_both_only"):
        flip = combined[view]["flip_rate"]
        assert (flip["count"], flip["denominator"], flip["point"]) == (6, 64, 0.09375)
    s2u, u2s = combined["all_pairs"]["safe_to_unsafe"], combined["all_pairs"]["unsafe_to_safe"]
    assert (s2u["count"], s2u["denominator"], s2u["point"]) == (4, 29, 4 / 29)
    assert (u2s["count"], u2s["denominator"], u2s["point"]) == (2, 35, 2 / 35)
    assert (s2u["clusters"], u2s["clusters"]) == (29, 35)
    # 57 - 61 correct over 64 pairs
    assert combined["all_pairs"]["delta_accuracy"]["point"] == -0.0625
    counts = combined["all_pairs"]["counts"]
    assert cd(counts["by_gold_label"]["0"]["safe_to_unsafe"]) == (4, 29)
    assert cd(counts["by_gold_label"]["1"]["unsafe_to_safe"]) == (1, 32)
    assert cd(counts["by_domain"]["workspace"]["flip_rate"]) == (2, 16)


def test_combined_intervals_from_the_engine(q8: dict[str, Any]) -> None:
    decisions: dict[str, dict[str, int]] = {}
    meta: dict[str, str] = {}
    for r in q8_rows():
        d = 1 if r["score"] is None or r["score"] != 0 else 0
        decisions.setdefault(r["base_sample_id"], {})[r["variant"]] = d
        meta[r["base_sample_id"]] = f"{r['domain']}:{0 if r['gold_label'] == 0 else 1}"
    flips = {b: int(v["original"] != v["combined"]) for b, v in decisions.items()}

    def ref(rows: list[Row]) -> tuple[float | None, float | None]:
        lower, upper, _ = reference_interval(rows, REPLICATES, 260828)
        return lower, upper

    combined = q8["edits"]["combined"]
    got = combined["all_pairs"]["flip_rate"]
    assert (got["lower"], got["upper"]) == ref([(b, None, f, 1) for b, f in flips.items()])
    got = combined["valid_both_only"]["flip_rate"]
    assert (got["lower"], got["upper"]) == ref([(b, meta[b], f, 1) for b, f in flips.items()])
    got = combined["all_pairs"]["safe_to_unsafe"]
    assert (got["lower"], got["upper"]) == ref(
        [(b, None, v["combined"], 1) for b, v in decisions.items() if v["original"] == 0])
    gold = {r["base_sample_id"]: int(r["gold_label"] != 0) for r in q8_rows()}
    got = combined["all_pairs"]["delta_accuracy"]
    assert (got["lower"], got["upper"]) == ref(
        [(b, meta[b], int(v["combined"] == gold[b]) - int(v["original"] == gold[b]), 1)
         for b, v in decisions.items()])


def test_cli_on_predictions_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_predictions(tmp_path / "preds.jsonl")
    assert main(["stats", str(path), "--out", str(tmp_path / "out"),
                 "--replicates", str(REPLICATES)]) == 0
    out = capsys.readouterr().out
    data = json.loads((tmp_path / "out" / "preds.stats.json").read_text())
    flip = data["edits"]["combined"]["all_pairs"]["flip_rate"]
    assert cd(flip) == (6, 64)
    assert data["settings"]["expected_rows"] == f"predictions:{path}"
    line = next(x for x in out.splitlines()
                if x.split()[:3] == ["combined", "all_pairs", "flip_rate"])
    assert line.split()[3:5] == ["6/64", "0.09375"]
    assert "original             64/64      61/64 = 0.953125" in out


@pytest.mark.parametrize("args", [["--seed", "-1"], ["--replicates", "0"],
                                  ["--confidence", "1"], ["--confidence", "0"],
                                  ["--confidence", "1.5"]])
def test_bad_settings_exit_2(tmp_path: Path, args: list[str],
                             capsys: pytest.CaptureFixture[str]) -> None:
    path = write_predictions(tmp_path / "preds.jsonl")
    assert main(["stats", str(path), *args]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and args[0] in err


GOOD = '{"base_sample_id": "b", "variant": "original", "domain": "d", "gold_label": 0, "score": 0}'


@pytest.mark.parametrize(("lines", "where", "field"), [
    ([GOOD, b'{"base_sample_id": "\xff"}'], "line 2", None),
    ([GOOD.replace('"score": 0', '"score": 0, "colour": 1')], "line 1", "colour"),
    ([GOOD.replace(', "score": 0', "")], "line 1", "score"),
    ([GOOD.replace('"score": 0', '"score": 0.3')], "line 1", "score"),
    ([GOOD.replace('"gold_label": 0', '"gold_label": true')], "line 1", "gold_label"),
    ([GOOD.replace('"domain": "d"', '"domain": ""')], "line 1", "domain"),
    ([GOOD, GOOD], "line 2", "variant"),
    ([GOOD, GOOD.replace('"original"', '"tool_alias"').replace('"gold_label": 0',
                                                              '"gold_label": 1')],
     "line 2", "gold_label"),
    ([GOOD, "", GOOD], "line 2", None),
    ([GOOD, "{not json"], "line 2", None),
    (["[1, 2]"], "line 1", None),
    ([], None, None),
])
def test_bad_predictions_file_exit_2(tmp_path: Path, lines: list[str | bytes],
                                     where: str | None, field: str | None,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "preds.jsonl"
    path.write_bytes(b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n"
                              for x in lines))
    assert main(["stats", str(path), "--replicates", "10"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert str(path) in err
    if where is not None:
        assert where in err
    if field is not None:
        assert f"field {field!r}" in err
    assert not (tmp_path / "stats.json").exists()
    assert not (tmp_path / "preds.stats.json").exists()


def test_two_predictions_files_in_one_folder_keep_their_own_stats(tmp_path: Path) -> None:
    first = write_predictions(tmp_path / "a.jsonl")
    second = tmp_path / "b.jsonl"
    second.write_bytes(first.read_bytes())
    for path in (first, second):
        assert main(["stats", str(path), "--replicates", "10"]) == 0
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["a.stats.json", "b.stats.json"]
    assert not (tmp_path / "stats.json").exists()
