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
    assert (args.rows, args.repeats) == (64, 3)
    assert args.configs == ["naive", "generate-b16", "lean-b16", "toy-hf"]
    args = bench.parse_args(["--configs", "toy-hf, naive,toy-hf", "--repeats", "1"])
    assert args.configs == ["naive", "toy-hf"] and args.repeats == 1


def test_the_naive_configuration_is_the_per_row_generate_loop() -> None:
    naive = bench.CONFIGS["naive"]
    assert naive.options == {"decode_loop": "generate", "batch_size": 1, "threads": 1}
    assert (naive.workers, naive.sort_by_length) == (1, False)
    assert bench.CONFIGS["toy-hf"].options == {}  # the shipped profile, untouched


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--rows", "0"], "must be >= 1"), (["--repeats", "0"], "must be >= 1"),
     (["--configs", "hf,mlx-q4"], "unknown configuration(s) hf, mlx-q4; choose from naive,"),
     (["--configs", ","], "(none given)")],
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


def test_ratios_min_median_and_identical_rows(tmp_path: Path) -> None:
    same = _run(tmp_path / "n0", {})
    changed = _run(tmp_path / "t1", {"c": [1, 3]})  # one row's tokens moved in repeat 2
    samples = [
        bench.Sample("naive", 0, 4, 10.0, 11.0, same),
        bench.Sample("toy-hf", 0, 4, 2.0, 5.0, _run(tmp_path / "t0", {})),
        bench.Sample("naive", 1, 4, 12.0, 13.0, _run(tmp_path / "n1", {})),
        bench.Sample("toy-hf", 1, 4, 2.5, 5.5, changed),
    ]
    naive, fast = bench.summarise(samples)
    assert (naive["name"], naive["vs_naive"], naive["identical"]) == ("naive", 1.0, 4)
    assert (fast["min_s"], fast["median_s"]) == (2.0, 2.25)
    assert fast["rows_per_s"] == 2.0 and fast["vs_naive"] == 5.0  # 10 s / 2 s
    assert fast["vs_naive_median_paired"] == pytest.approx(4.9)  # median(10/2, 12/2.5)
    assert fast["identical"] == 3  # the worst repeat counts
    # wall: median(11, 13) = 12 s for naive, median(5, 5.5) = 5.25 s for toy-hf
    assert fast["wall_s_median"] == 5.25 and fast["wall_vs_naive"] == pytest.approx(12 / 5.25)
    assert naive["wall_vs_naive"] == 1.0
    for key in ("name", "rows", "rows_per_s", "vs_naive", "identical"):
        assert key in fast
    lines = bench.format_table([naive, fast]).splitlines()
    assert lines[0].split()[:6] == ["config", "rows", "min_s", "median_s", "rows/s", "vs"]
    assert lines[2].split()[:10] == ["toy-hf", "4", "2.00", "2.25", "2.00", "5.00x", "4.90x",
                                     "3/4", "5.25", "2.29x"]


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
