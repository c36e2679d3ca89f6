"""``rundir.outputs``: where a check's JSON goes, and the bytes it is written as."""

from __future__ import annotations

from pathlib import Path

from guardrepro.rundir.outputs import GATE_JSON, output_dir, stats_path, write_stats


def test_stats_go_into_a_run_directory_and_beside_a_predictions_file(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    preds = tmp_path / "preds" / "toy.jsonl"
    preds.parent.mkdir()
    preds.write_text("{}\n")
    out = tmp_path / "out"
    assert stats_path(run) == run / "stats.json"
    assert stats_path(preds) == tmp_path / "preds" / "toy.stats.json"
    assert stats_path(run, out) == out / "stats.json"
    assert stats_path(preds, out) == out / "toy.stats.json"  # --out moves it, keeps its name
    assert output_dir(preds, None) / GATE_JSON == tmp_path / "preds" / "gate.json"
    assert output_dir(run, out) == out


def test_write_stats_writes_sorted_pretty_json_whole(tmp_path: Path) -> None:
    written = write_stats(tmp_path, None, {"b": [1, 2], "a": "é"})
    assert written == tmp_path / "stats.json"
    expected = '{\n  "a": "é",\n  "b": [\n    1,\n    2\n  ]\n}\n'  # by hand
    assert written.read_bytes() == expected.encode("utf-8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stats.json"]  # no temporary left
