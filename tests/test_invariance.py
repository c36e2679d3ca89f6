"""guardrepro check-invariance: sample choice, token comparison, and real runs
on a tiny Qwen2 with the transformers and MLX runners."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest
from runner_helpers import TEMPLATE, build_diverse_tiny, write_cohort, write_profile

from guardrepro.errors import InputError
from guardrepro.run.invariance import (
    RowAgreement,
    check_invariance,
    compare_passes,
    format_table,
    select_sample,
)
from guardrepro.run.runners.base import Generation, Timings
from guardrepro.rundir.cohort import read_cohort

T = Timings(0.0, 0.0, 0.0)


def gen(row: str, ids: list[int], finish: str = "stop") -> Generation:
    return Generation(row, tuple(ids), "", finish, tuple(0.0 for _ in ids), T)


def test_compare_passes_finds_first_divergence() -> None:
    alone = [gen("a", [5, 6, 7, 2]), gen("b", [5, 6, 7, 2]), gen("c", [5, 6, 9], "length"),
             gen("d", [4, 4], "length")]
    batched = [gen("a", [5, 6, 7, 2]), gen("b", [5, 8, 7, 2]), gen("c", [5, 6, 9, 1, 2]),
               gen("d", [4, 4], "stop")]
    rows = compare_passes(alone, batched)
    assert [r.identical for r in rows] == [True, False, False, False]
    assert [r.first_divergence for r in rows] == [None, 1, 3, 2]
    assert [r.common_prefix for r in rows] == [4, 1, 3, 2]
    with pytest.raises(InputError):
        compare_passes(alone[:2], batched[1:3])


def test_token_agreement_is_common_prefix_over_longer_length() -> None:
    from guardrepro.run.invariance import InvarianceReport

    rows = [RowAgreement("a", True, None, 4, 4, 4, "stop", "stop"),
            RowAgreement("b", False, 1, 1, 4, 4, "stop", "stop"),
            RowAgreement("c", False, 3, 3, 3, 5, "length", "stop")]
    report = InvarianceReport("p", "hf", "c", "0" * 64, 3, 0, 4, {}, {}, rows)
    assert report.identical_sequences == 1
    assert report.token_agreement == pytest.approx((4 + 1 + 3) / (4 + 4 + 5))
    assert not report.invariant
    table = format_table(report)
    assert "1/3 sequences identical" in table and "0.6154" in table


def test_select_sample_is_seeded_by_row_id_and_kept_in_cohort_order(tmp_path: Path) -> None:
    rows = read_cohort(write_cohort(tmp_path / "c.jsonl", 10))
    # by hand: the 3 ids with the smallest sha256("7:<id>")
    ranked = sorted(r.row_id for r in rows)
    ranked.sort(key=lambda i: hashlib.sha256(f"7:{i}".encode()).hexdigest())
    expected = sorted(ranked[:3])  # cohort order == id order for these rows
    assert [r.row_id for r in select_sample(rows, 3, 7)] == expected
    assert [r.row_id for r in select_sample(list(reversed(rows)), 3, 7)] == expected[::-1]
    with pytest.raises(InputError):
        select_sample(rows, 11, 0)
    with pytest.raises(InputError):
        select_sample(rows, 0, 0)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_diverse_tiny(tmp_path_factory.mktemp("inv") / "tiny")


def _files(tmp_path: Path, tiny: Path, **kw: object) -> tuple[Path, Path]:
    template = tmp_path / "template.txt"
    template.write_text(TEMPLATE, encoding="utf-8")
    cohort = write_cohort(tmp_path / "cohort.jsonl", 8)
    profile = write_profile(tmp_path / "p.toml", tiny, template, **kw)  # type: ignore[arg-type]
    return profile, cohort


def test_hf_fp32_batch_of_4_matches_batch_1(tmp_path: Path, tiny: Path) -> None:
    profile, cohort = _files(tmp_path, tiny, options={"batch_size": 4},
                             decoding='mode = "greedy"\nmax_new_tokens = 12')
    report = check_invariance(profile, cohort, 5, seed=3, progress=False)
    expected = [r.row_id for r in select_sample(read_cohort(cohort), 5, 3)]
    assert [r.row_id for r in report.rows] == expected
    assert report.batch_size == 4 and report.backend == "hf"
    assert report.runner["dtype"] == "float32"
    # transformers fp32 on CPU: left-padded batches gave batch-1 tokens (docs/BACKENDS.md)
    assert report.invariant and report.token_agreement == 1.0
    assert all(r.tokens_batch1 == r.tokens_batched > 0 for r in report.rows)


def test_cli_writes_json_and_table(tmp_path: Path, tiny: Path) -> None:
    from click.testing import CliRunner

    from guardrepro.cli import cli

    profile, cohort = _files(tmp_path, tiny, options={"batch_size": 2},
                             decoding='mode = "greedy"\nmax_new_tokens = 6')
    out = tmp_path / "inv.json"
    result = CliRunner().invoke(cli, ["check-invariance", "--profile", str(profile), "--cohort",
                                      str(cohort), "--sample", "3", "--batch-size", "3",
                                      "--out", str(out), "--no-progress",
                                      "--fail-on-divergence"])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["batch_size"] == 3 and data["sample"] == 3 and len(data["rows"]) == 3
    assert data["identical_sequences"] == 3
    assert "hf batch 1 vs batch 3: 3/3 sequences identical" in result.output


@pytest.mark.mlx
@pytest.mark.skipif(importlib.util.find_spec("mlx_lm") is None, reason="mlx-lm not installed")
def test_mlx_runner_check(tmp_path: Path, tiny: Path) -> None:
    profile, cohort = _files(tmp_path, tiny, backend="mlx", options={"batch_size": 1},
                             decoding='mode = "greedy"\nmax_new_tokens = 6')
    # the hf-only options of write_profile's defaults are not MLX options
    text = profile.read_text().replace('dtype = "float32"\ndevice = "cpu"\n', "")
    profile.write_text(text.replace("threads = 1\n", ""))
    report = check_invariance(profile, cohort, 3, progress=False)
    assert report.backend == "mlx" and report.batch_size == 1
    assert report.invariant
    assert report.notes == ["the batch size is 1: both passes run one request per call"]


def test_several_batch_sizes_share_one_batch_1_pass(tmp_path: Path, tiny: Path) -> None:
    """``--batch-size 2,4`` (the lean decoder with 2 slots): one report per size,
    each against the same batch-1 tokens; a size above the slots is noted."""
    from click.testing import CliRunner

    from guardrepro.cli import cli

    profile, cohort = _files(tmp_path, tiny,
                             options={"batch_size": 1, "decode_loop": "lean",
                                      "decode_slots": 2},
                             decoding='mode = "greedy"\nmax_new_tokens = 8')
    out = tmp_path / "inv.json"
    result = CliRunner().invoke(cli, ["check-invariance", "--profile", str(profile), "--cohort",
                                      str(cohort), "--sample", "5", "--batch-size", "2,4,2",
                                      "--out", str(out), "--no-progress",
                                      "--fail-on-divergence"])
    assert result.exit_code == 0, result.output
    reports = json.loads(out.read_text())["reports"]
    assert [r["batch_size"] for r in reports] == [2, 4]
    assert all(r["identical_sequences"] == 5 for r in reports)
    first, second = ([row["tokens_batch1"] for row in r["rows"]] for r in reports)
    assert first == second  # one batch-1 pass
    assert reports[0]["notes"] == []
    assert reports[1]["notes"] == ["batch size 4: at most 2 requests are computed together "
                                   "(decode_slots = 2)"]
    assert "hf batch 1 vs batch 4: 5/5 sequences identical" in result.output


@pytest.mark.parametrize(("text", "sizes"), [("16", [16]), ("1, 16,44,64,16", [1, 16, 44, 64])])
def test_batch_size_lists(text: str, sizes: list[int]) -> None:
    from guardrepro.run.invariance import parse_sizes

    assert parse_sizes(text) == sizes
    for bad in ("0", "16,x", "", "4,-1"):
        with pytest.raises(InputError) as exc:
            parse_sizes(bad)
        assert exc.value.field == "batch_size"
