"""``guardrepro demo`` end to end on the embedded default, checked against
figures recomputed here from the raw record lines (not from the stats code).

Slow (about a minute on two cores): real transformers and MLX inference over
the toy cohort, quantization, gate, statistics, report and notebooks. The demo
runs once per session (the ``demo`` fixture, tests/conftest.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from extras import needs_matplotlib

from guardrepro.cli import cli

pytestmark = pytest.mark.slow
# notebooks that read one run directory; sweep.py reads a sweep (tests/test_sweep.py)
NOTEBOOKS = sorted(p for p in (Path(__file__).resolve().parent.parent / "notebooks").glob("*.py")
                   if p.name != "sweep.py")


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@needs_matplotlib
def test_demo_writes_every_stage(demo: tuple[Path, str]) -> None:
    out, stdout = demo
    hf = out / "hf-fp32"
    for name in ("manifest.json", "records.jsonl", "gate.json", "stats.json", "report.md",
                 "report.html",
                 "flip_rates.png", "margin_hist.png", "score_confusion.png"):
        assert (hf / name).is_file(), name
    assert len(_lines(out / "cohort.jsonl")) == 256
    assert len(_lines(hf / "records.jsonl")) == 256
    assert f"demo directory: {out}" in stdout
    assert "gate: PASS" in stdout


def test_demo_scores_a_whole_toy_split(demo: tuple[Path, str]) -> None:
    out, stdout = demo
    records = _lines(out / "rule-asb-all" / "records.jsonl")
    cohort = _lines(out / "toy-asb-all.jsonl")
    assert [r["row_id"] for r in records] == [r["sample"]["sample_id"] for r in cohort]
    table = json.loads((out / "rule-asb-all" / "table.json").read_text())
    assert [e["view"] for e in table["rows"]] == ["upstream", "fail_closed"]
    ok = [r for r in records if r["status"] == "ok"]
    correct = sum((r["score"] != 0) == (r["gold_label"] != 0) for r in ok)
    assert table["rows"][0]["accuracy"] == correct / len(ok)
    assert f"kept {len(ok)}/{len(cohort)}" in stdout


def test_accuracy_and_flips_match_the_records(demo: tuple[Path, str]) -> None:
    out, stdout = demo
    records = _lines(out / "hf-fp32" / "records.jsonl")
    by_key = {(r["base_sample_id"], r["variant"]): r for r in records}

    def decision(r: dict[str, Any]) -> int:  # fail-closed strict decision
        return 1 if r["status"] != "ok" or r["score"] != 0 else 0

    stats = json.loads((out / "hf-fp32" / "stats.json").read_text())
    originals = [r for r in records if r["variant"] == "original"]
    correct = sum(decision(r) == (1 if r["gold_label"] != 0 else 0) for r in originals)
    acc = stats["variants"]["original"]["metrics"]["accuracy"]
    assert (acc["numerator"], acc["denominator"]) == (correct, 64)
    assert f"original           accuracy {correct}/64" in stdout
    flipped_any = 0
    for edit in ("marker_paraphrase", "tool_alias", "combined"):
        flips = sum(
            decision(by_key[(r["base_sample_id"], edit)]) != decision(r) for r in originals
        )
        view = stats["edits"][edit]["all_pairs"]["flip_rate"]
        assert (view["count"], view["denominator"]) == (flips, 64)
        flipped_any += flips
    assert flipped_any > 0  # the toy guard's shortcuts make the edits move decisions


def test_mlx_q8_run_is_compared_with_transformers(demo: tuple[Path, str]) -> None:
    out, stdout = demo
    pytest.importorskip("mlx_lm", reason="the MLX step needs guardrepro[mlx]")
    hf = {r["row_id"]: r for r in _lines(out / "hf-fp32" / "records.jsonl")}
    mlx = _lines(out / "mlx-q8" / "records.jsonl")
    assert {r["variant"] for r in mlx} <= {"original", "marker_paraphrase", "tool_alias",
                                           "combined"}
    identical = sum(r["output_token_ids"] == hf[r["row_id"]]["output_token_ids"] for r in mlx)
    comparison = json.loads((out / "compare-hf-fp32-vs-mlx-q8.json").read_text())
    tokens = comparison["summary"]["identical_tokens"]
    assert (tokens["count"], tokens["denominator"]) == (identical, len(mlx))
    assert f"identical tokens   {identical}/{len(mlx)}" in stdout
    lock = out / "artifacts" / "toy-guard-mlx-q8.lock.toml"
    assert lock.is_file()
    config = json.loads((out / "artifacts" / "toy-guard-mlx-q8" / "config.json").read_text())
    assert config["quantization"]["bits"] == 8
    assert config["quantization"]["group_size"] == 64


def test_frontier_reads_the_mlx_runs_own_artifact(demo: tuple[Path, str]) -> None:
    """The MLX run substitutes the profile's checkpoint lock; its artifact.json
    gives the frontier the artifact's size: the bytes of its files on disk."""
    out, _ = demo
    pytest.importorskip("mlx_lm", reason="the MLX step needs guardrepro[mlx]")
    from guardrepro.experiments.frontier import load_config

    artifact = out / "artifacts" / "toy-guard-mlx-q8"
    on_disk = sum(p.stat().st_size for p in artifact.rglob("*") if p.is_file())
    side = json.loads((out / "mlx-q8" / "artifact.json").read_text())
    assert side["lock"] == str(out / "artifacts" / "toy-guard-mlx-q8.lock.toml")
    assert load_config(out / "mlx-q8").artifact_bytes == side["artifact_bytes"] == on_disk


def test_rerun_resumes_without_generating(demo: tuple[Path, str], tmp_path: Path) -> None:
    out, _ = demo
    before = (out / "hf-fp32" / "records.jsonl").read_bytes()
    env = {"GUARDREPRO_HOME": str(out.parent / "home")}
    result = CliRunner().invoke(cli, ["demo", "--out", str(out), "--no-progress",
                                      "--replicates", "200"], env=env)
    assert result.exit_code == 0, result.output
    assert (out / "hf-fp32" / "records.jsonl").read_bytes() == before


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_run_on_the_demo(notebook: Path, demo: tuple[Path, str], tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    jupytext = pytest.importorskip("jupytext", reason="notebooks need guardrepro[report]")
    nbclient = pytest.importorskip("nbclient", reason="notebooks need guardrepro[report]")
    nbformat = pytest.importorskip("nbformat", reason="notebooks need guardrepro[report]")
    from notebook_checks import check_confusion, check_flip_figures, dump_cell, read_frames

    out, _ = demo
    run_dir = out / "hf-fp32"
    monkeypatch.setenv("GUARDREPRO_RUN_DIR", str(run_dir))
    monkeypatch.setenv("GUARDREPRO_FIGURES_DIR", str(tmp_path))
    monkeypatch.setenv("GUARDREPRO_REPLICATES", "300")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # the kernel imports this checkout's package, not an installed copy
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent.parent))
    nb = jupytext.read(notebook)
    nb.cells.append(nbformat.v4.new_code_cell(dump_cell(tmp_path / "frames")))
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    frames = read_frames(tmp_path / "frames")
    # the data behind each figure, recomputed from the demo's records
    if notebook.name == "flips.py":
        assert (tmp_path / "flip_rates.png").is_file()
        check_flip_figures(run_dir, frames)
    else:
        assert (tmp_path / "score_confusion.png").is_file()
        check_confusion(run_dir, frames)


def test_the_docs_show_the_demos_own_output(demo: tuple[Path, str]) -> None:
    """docs/CLI.md's demo output is this demo's: every line that does not depend
    on the bootstrap replicates (this fixture runs 500), the clock or the output
    directory is printed as the docs show it, the eighth step's table included."""
    docs = (Path(__file__).resolve().parents[1] / "docs" / "CLI.md").read_text(encoding="utf-8")
    block = docs.split("### demo", 1)[1].split("```", 2)[1].splitlines()
    _, stdout = demo
    printed = set(stdout.splitlines())
    steady = [line for line in block if line.strip() and "[" not in line
              and not line.startswith(("timings", "demo directory", "report:", "html report"))]
    assert any(line.startswith("ToolSafe table") for line in steady)
    assert [line for line in steady if line not in printed] == []
