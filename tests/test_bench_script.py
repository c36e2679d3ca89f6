"""scripts/bench_runners.py: argument handling, baseline ratios/agreement, table format.

No model runs here (the benchmark itself is run by hand); expectations are by hand.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

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


def test_defaults_put_the_baseline_first_and_leave_vllm_out() -> None:
    args = bench.parse_args([])
    assert args.rows == 16
    assert args.profiles == ["hf-b1", "hf", "mlx-q8", "mlx-q8-f32", "mlx-bf16"]
    assert args.json is None and args.home is None and args.work is None


def test_profiles_are_deduplicated_baseline_first_and_vllm_appended() -> None:
    args = bench.parse_args(["--rows", "8", "--profiles", "mlx-q8, hf-b1,mlx-q8", "--vllm"])
    assert args.rows == 8
    assert args.profiles == ["hf-b1", "mlx-q8", "vllm"]


def test_the_vllm_child_measures_only_what_it_is_given() -> None:
    args = bench.parse_args(["--profiles", "vllm", "--worker-json", "out.json"])
    assert args.profiles == ["vllm"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rows", "0"], "must be >= 1"),
        (["--profiles", "hf,mlx-q4"], "unknown profile(s) mlx-q4; choose from hf-b1, hf,"),
        (["--profiles", ","], "(none given)"),
    ],
)
def test_bad_arguments_exit_2_naming_the_problem(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.parse_args(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def _result(name: str, run_dir: Path, tokens_per_s: float, gen_tokens_per_s: float) -> Any:
    return bench.Result(
        profile=name, runner="runners/toy-hf.toml", recipe=None, batch_size=1, rows=4,
        tokens=40, wall_s=40 / tokens_per_s, gen_s=40 / gen_tokens_per_s, quantize_s=0.0,
        peak_memory_bytes=3 * 2**20, memory_source="records (hf)", run_dir=str(run_dir),
        rows_per_s=4 * tokens_per_s / 40, tokens_per_s=tokens_per_s,
        gen_tokens_per_s=gen_tokens_per_s,
    )


def test_ratios_and_agreement_against_the_baseline(tmp_path: Path) -> None:
    base_dir = write_run(tmp_path / "base", [
        ("a", "original", "banking", 0.0, 0), ("b", "original", "banking", 1.0, 1),
        ("c", "original", "slack", 1.0, 0.5), ("d", "original", "slack", 1.0, 1)])
    other_dir = write_run(tmp_path / "other", [
        ("a", "original", "banking", 0.0, 0), ("b", "original", "banking", 1.0, 0),
        ("c", "original", "slack", 1.0, 0.5), ("d", "original", "slack", 1.0, "parse")])
    results = [_result("hf-b1", base_dir, 10.0, 20.0), _result("mlx-q8", other_dir, 25.0, 10.0)]
    bench.compare_with_baseline(results)
    base, other = results
    assert (base.ratio, base.gen_ratio, base.strict_agree, base.compared) == (1.0, 1.0, 4, 4)
    assert other.ratio == pytest.approx(2.5) and other.gen_ratio == pytest.approx(0.5)
    # strict decisions 0,1,1,1 vs 0,0,1,- : rows a and c agree; d is a parse error in the
    # other run, and agreement needs both rows valid (the gate's rule); no tokens at all
    assert (other.strict_agree, other.identical_tokens, other.compared) == (2, 4, 4)


def test_table_has_a_header_and_one_aligned_line_per_profile(tmp_path: Path) -> None:
    done = replace(_result("hf", tmp_path, 25.0, 10.0), ratio=2.5, gen_ratio=0.5,
                   identical_tokens=7, strict_agree=8, compared=8)
    pending = _result("mlx-bf16", tmp_path, 10.0, 20.0)
    lines = bench.format_table([done, pending]).splitlines()
    assert len(lines) == 3 and len({len(line) for line in lines}) == 1
    assert lines[0].split()[:4] == ["profile", "batch", "rows", "tokens"]
    assert lines[1].split() == ["hf", "1", "4", "40", "1.60", "2.50", "25.0", "2.50x", "10.0",
                                "0.50x", "3", "7/8", "8/8", "0.00"]
    assert lines[2].split()[7] == "-" and lines[2].split()[-3:-1] == ["-", "-"]
