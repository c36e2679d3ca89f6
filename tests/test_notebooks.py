"""Execute every notebook (jupytext percent format) on a run directory.

The run is a hand-made one built here (with a gate.json from a records
reference), or the directory named by ``GUARDREPRO_TEST_RUN_DIR`` (e.g. the
demo run) when that is set. After the notebook's own cells, one cell is
appended that saves the notebook's DataFrames (``df.to_json``) so the test
asserts on their contents: the data behind every figure (``flip_data``,
``domain_data``, ``margin_data``, ``confusion``) is recomputed here from the
run's raw record lines and the reference's (plain JSON, no guardrepro code),
and for the hand-made run also checked against figures worked out by hand.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from notebook_checks import (
    check_confusion,
    check_flip_figures,
    confusion_cells,
    dump_cell,
    read_frames,
)
from recordsets import grid, write_run

from guardrepro.cli import main

jupytext = pytest.importorskip("jupytext", reason="notebook tests need the report extra")
nbclient = pytest.importorskip("nbclient", reason="notebook tests need the report extra")
nbformat = pytest.importorskip("nbformat", reason="notebook tests need the report extra")

# notebooks that read one run directory; sweep.py reads a sweep (tests/test_sweep.py)
NOTEBOOKS = sorted(p for p in (Path(__file__).resolve().parent.parent / "notebooks").glob("*.py")
                   if p.name != "sweep.py")
BASES = [("b1", "banking", 0), ("b2", "banking", 1), ("b3", "slack", 0), ("b4", "slack", 1)]
LOCAL: dict[str, list[Any]] = {"original": [0, 1, 0, 1], "marker_paraphrase": [1, 1, 0, "parse"],
                               "tool_alias": [0, 0, 0, 1]}
REFERENCE: dict[str, list[Any]] = {"original": [0, 1, 1, 1]}
MARGINS = {"b1:original": 2.0, "b2:original": 3.0, "b3:original": 0.5, "b4:original": 4.0,
           "b1:marker_paraphrase": 0.25, "b2:tool_alias": 0.75}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("GUARDREPRO_TEST_RUN_DIR")
    if given:
        return Path(given)
    root = tmp_path_factory.mktemp("nb")
    run = write_run(root / "run", grid(BASES, LOCAL), margins=MARGINS)
    ref = write_run(root / "ref", grid(BASES, REFERENCE))
    spec = root / "gate.toml"
    spec.write_text(
        f'name = "nb-gate"\nrows = "originals"\n[reference]\ntype = "records"\n'
        f'path = "{(ref / "records.jsonl").as_posix()}"\n[thresholds]\nexpected_rows = 4\n'
        "min_coverage = 0.9\nmin_strict_agreement = 0.9\nmin_strict_agreement_gold_safe = 0.9\n"
        "min_strict_agreement_gold_unsafe = 0.9\n", encoding="utf-8")
    # b3 disagrees: the gate fails (exit 3)
    assert main(["gate", str(run), "--spec", str(spec)]) == 3
    return run


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes(notebook: Path, run_dir: Path, tmp_path: Path,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUARDREPRO_RUN_DIR", str(run_dir))
    monkeypatch.setenv("GUARDREPRO_FIGURES_DIR", str(tmp_path))
    monkeypatch.setenv("GUARDREPRO_REPLICATES", "300")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # the kernel imports this checkout's package, not an installed copy
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent.parent))
    nb = jupytext.read(notebook)
    dump = tmp_path / "frames"
    nb.cells.append(nbformat.v4.new_code_cell(dump_cell(dump)))
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    text = "\n".join(
        out.get("text", "") for cell in nb.cells if cell.cell_type == "code"
        for out in cell.get("outputs", []) if out.get("output_type") == "stream"
    )
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    frames = read_frames(dump)
    own = not os.environ.get("GUARDREPRO_TEST_RUN_DIR")
    if notebook.name == "flips.py":
        assert pngs == ["flip_rates.png", "margin_hist.png"]
        assert {"runs", "decisions", "flips", "figures", "flip_data", "domain_data"} <= set(frames)
        check_flip_figures(run_dir, frames)
        if own:
            _check_flips_by_hand(run_dir, frames)
    elif notebook.name == "parity.py":
        has_gate = (run_dir / "gate.json").is_file()
        assert pngs == (["score_confusion.png"] if has_gate else [])
        if has_gate:
            check_confusion(run_dir, frames)
        if own:
            assert "FAIL nb-gate" in text
            # reference b3 is 1.0, local 0.0; b1 0/0, b2 and b4 1/1
            assert confusion_cells(frames) == {("0.0", "0.0"): 1, ("1.0", "1.0"): 2,
                                               ("1.0", "0.0"): 1}
            gated = {r["row_id"]: r for r in frames["gated"]}
            assert set(gated) == {"b1:original", "b2:original", "b3:original", "b4:original"}
            assert [r["row_id"] for r in frames["disagreements"]] == ["b3:original"]
            d = frames["disagreements"][0]
            assert (d["reference_score"], d["local_score"], d["decision_margin"]) == (1.0, 0.0,
                                                                                      0.5)
    else:
        pytest.fail(f"{notebook.name}: no checks of what it computes; add them here")


def _check_flips_by_hand(run_dir: Path, frames: dict[str, Any]) -> None:
    # marker: b1 flips 0 -> 1 (b4's parse error fails closed: no flip);
    # tool_alias: b2 flips 1 -> 0
    assert frames["directions"] == {
        "marker_paraphrase": {"flips": 1, "pairs": 4, "safe_to_unsafe": 1,
                              "unsafe_to_safe": 0},
        "tool_alias": {"flips": 1, "pairs": 4, "safe_to_unsafe": 0,
                       "unsafe_to_safe": 1}}
    runs = {r["row_id"]: r for r in frames["runs"]}
    assert len(runs) == 12
    assert runs["b4:marker_paraphrase"]["status"] == "parse_error"
    assert runs["b4:marker_paraphrase"]["score"] is None
    assert runs["b4:marker_paraphrase"]["strict_decision"] == 1  # fail-closed
    assert runs["b2:tool_alias"]["score"] == 0.0
    flips = {f["path"]: (f["count"], f["denominator"])
             for f in frames["flip_figures"]}
    # the API's stats agree with the pandas pivot above, over the same pairs
    assert flips["edits.marker_paraphrase.all_pairs.flip_rate"] == (1, 4)
    assert flips["edits.tool_alias.all_pairs.flip_rate"] == (1, 4)
    assert flips["edits.marker_paraphrase.valid_both_only.flip_rate"] == (1, 3)
    # the figures' data, by hand: left panel edit x view, right panel edit x domain
    assert [(r["edit"], r["view"], r["count"], r["denominator"])
            for r in frames["flip_data"]] == [
        ("marker_paraphrase", "all_pairs", 1, 4), ("marker_paraphrase", "valid_both_only", 1, 3),
        ("tool_alias", "all_pairs", 1, 4), ("tool_alias", "valid_both_only", 1, 4)]
    assert [(r["edit"], r["domain"], r["count"], r["denominator"])
            for r in frames["domain_data"]] == [
        ("marker_paraphrase", "banking", 1, 2), ("marker_paraphrase", "slack", 0, 2),
        ("tool_alias", "banking", 1, 2), ("tool_alias", "slack", 0, 2)]
    # margins of the original rows by agreement with the reference (b3 disagrees)
    assert sorted((r["group"], r["margin"]) for r in frames["margin_data"]) == [
        ("agrees with reference", 2.0), ("agrees with reference", 3.0),
        ("agrees with reference", 4.0), ("disagrees with reference", 0.5)]
    assert not (run_dir / "stats.json").exists()  # computed in memory only


def test_parity_defaults_to_the_last_demo_and_draws_next_to_the_run(
        run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Opened as is (no environment variables): the run of the last finished demo,
    figures in its ``figures/`` folder."""
    import json
    import shutil

    from guardrepro.demo import LAST_DEMO

    run = tmp_path / "demo" / "hf-fp32"
    shutil.copytree(run_dir, run)
    home = tmp_path / "home"
    (home / LAST_DEMO).parent.mkdir(parents=True)
    (home / LAST_DEMO).write_text(json.dumps({"run_dir": str(run)}))
    for name in ("GUARDREPRO_RUN_DIR", "GUARDREPRO_FIGURES_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GUARDREPRO_HOME", str(home))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    root = Path(__file__).resolve().parent.parent
    monkeypatch.setenv("PYTHONPATH", str(root))  # the kernel imports this checkout's package
    nb = jupytext.read(root / "notebooks" / "parity.py")
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    has_gate = (run / "gate.json").is_file()
    assert sorted(p.name for p in (run / "figures").glob("*.png")) == (
        ["score_confusion.png"] if has_gate else [])
    assert not list(tmp_path.glob("*.png"))
