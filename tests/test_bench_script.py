"""scripts/bench_runners.py: arguments, ratios against the naive loop, identical rows, table.

No model runs here (the benchmark itself is run by hand); expectations are by hand.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
from recordsets import write_run

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_runners.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_runners", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_runners"] = module  # dataclasses resolve annotations through it
    spec.loader.exec_module(module)
    return module


bench = _load()
SPECS = [("a", "original", "banking", 0.0, 0), ("b", "original", "banking", 1.0, 1),
         ("c", "original", "slack", 1.0, 0.5), ("d", "original", "slack", 1.0, 1)]


def test_defaults_put_the_naive_baseline_first() -> None:
    args = bench.parse_args([])
    assert (args.rows, args.repeats, args.in_process) == (64, 3, False)
    assert args.configs == ["naive", "generate-b16", "toy-hf-w1", "toy-hf"]
    args = bench.parse_args(["--configs", "toy-hf, naive,toy-hf", "--repeats", "1"])
    assert args.configs == ["naive", "toy-hf"] and args.repeats == 1


def test_the_naive_configuration_is_the_profile_with_the_per_row_generate_loop() -> None:
    naive = bench.CONFIGS["naive"]
    assert naive.options == {"decode_loop": "generate", "batch_size": 1}
    assert (naive.workers, naive.sort_by_length) == (1, False)
    assert bench.CONFIGS["toy-hf"].options == {}  # the shipped profile, untouched


def test_a_configuration_becomes_a_profile_file_a_fresh_process_can_load(tmp_path: Path) -> None:
    """The written profile is the shipped one with the overrides, and names the same
    lock files (absolute) although it lives elsewhere."""
    from guardrepro.run.profile import RunProfile

    shipped = RunProfile.load(bench.ROOT / "runners/toy-hf.toml")
    naive = RunProfile.load(bench.profile_file("naive", tmp_path, tmp_path / "home"))
    assert naive.path.parent == tmp_path / "profiles"
    assert naive.checkpoint.lock == shipped.checkpoint.lock
    assert naive.guard.template_lock == shipped.guard.template_lock
    assert dict(naive.backend_options) == {**shipped.backend_options, "decode_loop": "generate",
                                           "batch_size": 1}
    assert (naive.workers, naive.sort_by_length) == (1, False)
    assert naive.decoding == shipped.decoding
    shipped_again = RunProfile.load(bench.profile_file("toy-hf", tmp_path, tmp_path / "home"))
    assert dict(shipped_again.backend_options) == dict(shipped.backend_options)
    assert shipped_again.workers == shipped.workers == 2


def test_the_generation_span_is_read_from_the_line_the_run_logs(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from guardrepro.run.pipeline import RunSummary
    from guardrepro.run.workers import log_summary

    summary = RunSummary(run_dir=tmp_path, run_id="r", rows_in_cohort=4, rows_selected=4,
                         already_done=0, generated=4, remaining=0, counts={"ok": 4},
                         elapsed_s=3.0, generation_started=1000.25,
                         generation_finished=1002.5)
    with caplog.at_level(logging.INFO, logger="guardrepro.run.workers"):
        log_summary(summary)
    spans = bench.SPAN.findall(caplog.text)
    assert [tuple(float(v) for v in span) for span in spans] == [(1000.25, 1002.5)]


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--rows", "0"], "must be >= 1"), (["--repeats", "0"], "must be >= 1"),
     (["--configs", "hf,mlx-q4"], "unknown configuration(s) hf, mlx-q4; choose from naive,"),
     (["--configs", ","], "(none given)"),
     (["--configs", "toy-hf-spawn"], "a start method is chosen only with --in-process")],
)
def test_bad_arguments_exit_2_naming_the_problem(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.parse_args(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def _run(path: Path, tokens: dict[str, list[int]]) -> Path:
    run = write_run(path, SPECS)
    lines = (run / "records.jsonl").read_text().splitlines()
    out = []
    for line in lines:
        record = json.loads(line)
        record["output_token_ids"] = tokens.get(record["base_sample_id"], [1, 2])
        out.append(json.dumps(record))
    (run / "records.jsonl").write_text("\n".join(out) + "\n")
    return run


def test_paired_ratios_per_round_medians_and_identical_rows(tmp_path: Path) -> None:
    same = _run(tmp_path / "n0", {})
    changed = _run(tmp_path / "t1", {"c": [1, 3]})  # one row's tokens moved in round 2
    samples = [
        bench.Sample("naive", 0, 4, 10.0, 11.0, same, 0.5, 2.0),
        bench.Sample("toy-hf", 0, 4, 2.0, 5.0, _run(tmp_path / "t0", {}), 2.0, 3.0),
        bench.Sample("naive", 1, 4, 12.0, 13.0, _run(tmp_path / "n1", {}), 0.7, 4.0),
        bench.Sample("toy-hf", 1, 4, 2.5, 5.5, changed, 2.5, 5.0),
    ]
    naive, fast = bench.summarise(samples)
    assert (naive["name"], naive["gen_vs_naive"], naive["identical"]) == ("naive", 1.0, 4)
    assert naive["wall_vs_naive"] == 1.0 and naive["load"] == 3.0
    # medians of the configuration's own runs
    assert (fast["gen_s"], fast["wall_s"], fast["startup_s"]) == (2.25, 5.25, 2.25)
    # per round: generation 10/2 = 5 and 12/2.5 = 4.8; wall 11/5 = 2.2 and 13/5.5
    assert [r["gen"] for r in fast["rounds"]] == [5.0, 4.8]
    assert fast["rounds"][1]["wall"] == pytest.approx(13 / 5.5)
    assert fast["gen_vs_naive"] == pytest.approx(4.9) and fast["gen_vs_naive_worst"] == 4.8
    assert fast["wall_vs_naive"] == pytest.approx((2.2 + 13 / 5.5) / 2)
    assert fast["wall_vs_naive_worst"] == pytest.approx(2.2)
    assert fast["identical"] == 3  # the worst round counts
    assert fast["load"] == 4.0
    lines = bench.format_table([naive, fast]).splitlines()
    assert lines[0].split()[:5] == ["config", "rows", "start-up", "s", "gen"]
    assert lines[2].split()[:11] == ["toy-hf", "4", "2.25", "2.25", "5.25", "4.90x", "4.80x",
                                     "2.28x", "2.20x", "3/4", "4.0"]
    assert lines[-2:] == ["round 1 (gen / wall vs naive): toy-hf 5.00x / 2.20x",
                          "round 2 (gen / wall vs naive): toy-hf 4.80x / 2.36x"]


def test_bench_ray_identity_names_each_differing_field() -> None:
    """scripts/bench_ray.py's identical column, on hand-built records: equal ->
    yes; a margin off on 2 of 3 rows by 1e-6 and 3e-6 and one text changed ->
    the two fields, their row counts and the margins' largest difference."""
    from scripts.bench_ray import identity

    def rec(rid: str, margin: float, text: str = "safe") -> dict[str, object]:
        return {"row_id": rid, "output_text": text, "attempts": [{"margin": margin}]}

    want = [rec("a", 0.5), rec("b", 0.25), rec("c", 0.125)]
    assert identity([dict(r) for r in want], want) == "yes"
    got = [rec("a", 0.5 + 1e-6), rec("b", 0.25 - 3e-6, "unsafe"), rec("c", 0.125)]
    assert identity(got, want) == ("no: attempts.0.margin 2/3 (max 3.0e-06), "
                                   "output_text 1/3")
    assert identity(list(reversed(got)), want) == "no: other rows"
