"""``run --workers N``, rows sorted by prompt length, and the profile keys behind them.

Expectations: the records of a plain one-process run with ``generate`` at
batch 1 (the naive loop) on the same tiny random Qwen2 and cohort; cohort
order read from the cohort file.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from runner_helpers import (
    TEMPLATE,
    build_diverse_tiny,
    cohort_row,
    write_cohort,
    write_profile,
)

from guardrepro.errors import InputError
from guardrepro.run.pipeline import run_cohort
from guardrepro.run.profile import RunProfile
from guardrepro.run.workers import physical_cores, run_with_workers, worker_profile
from guardrepro.rundir.cohort import read_cohort
from guardrepro.rundir.manifest import read_manifest
from guardrepro.rundir.records import read_records

CONTENT = ("row_id", "output_token_ids", "output_text", "finish_reason", "status", "score",
           "error_type", "components", "input_sha256", "prompt_tokens")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("workers")
    tiny = build_diverse_tiny(base / "tiny")
    template = base / "template.txt"
    template.write_text(TEMPLATE, encoding="utf-8")
    fast = write_profile(base / "fast.toml", tiny, template,
                         options={"decode_loop": "lean", "batch_size": 3},
                         decoding='mode = "greedy"\nmax_new_tokens = 10')
    fast.write_text("sort_by_length = true\n" + fast.read_text(encoding="utf-8"))
    naive = write_profile(base / "naive.toml", tiny, template, options={"batch_size": 1},
                          decoding='mode = "greedy"\nmax_new_tokens = 10')
    cohort = write_cohort(base / "cohort.jsonl", 7)
    reference = base / "naive-run"
    run_cohort(naive, cohort, reference, progress=False)
    return {"base": base, "fast": fast, "cohort": cohort, "reference": reference}


def _content(run_dir: Path) -> list[dict[str, object]]:
    return [{k: getattr(r, k) for k in CONTENT} for r in read_records(run_dir)]


def test_sorted_lean_run_matches_the_naive_loop_in_cohort_order(
    setup: dict[str, Path], tmp_path: Path
) -> None:
    profile = RunProfile.load(setup["fast"])
    assert profile.sort_by_length and profile.workers == 1
    out = tmp_path / "sorted"
    run_cohort(profile, setup["cohort"], out, progress=False)
    want = _content(setup["reference"])
    assert [r["row_id"] for r in want] == [r.row_id for r in read_cohort(setup["cohort"])]
    lengths = [r["prompt_tokens"] for r in want]
    assert lengths != sorted(lengths)  # sorting really reorders this cohort
    assert _content(out) == want
    margins = [(a.decision_margin, b.decision_margin)
               for a, b in zip(read_records(out), read_records(setup["reference"]), strict=True)]
    assert all((a is None) == (b is None) for a, b in margins)
    assert all(a is None or b is None or a == pytest.approx(b, abs=1e-4) for a, b in margins)


@pytest.mark.slow  # spawns worker processes
def test_two_workers_give_the_one_process_records(
    setup: dict[str, Path], tmp_path: Path
) -> None:
    profile = RunProfile.load(setup["fast"])
    one = tmp_path / "one"
    two = tmp_path / "two"
    run_with_workers(profile, setup["cohort"], one, workers=1, progress=False)
    summary = run_with_workers(profile, setup["cohort"], two, workers=2, progress=False)
    assert summary.generated == 7 and summary.remaining == 0
    assert summary.generation_finished >= summary.generation_started > 0
    assert _content(two) == _content(one) == _content(setup["reference"])
    a, b = read_manifest(one), read_manifest(two)
    assert a is not None and b is not None and b.shard is None
    assert a.provenance_sha256 == b.provenance_sha256  # threads fixed to 1 by the profile
    assert {r.run_id for r in read_records(two)} == {"two"}
    assert not (tmp_path / ".two.workers").exists()  # shard runs removed after the merge
    # rerunning into the finished directory resumes it (nothing left to do)
    again = run_with_workers(profile, setup["cohort"], two, workers=2, progress=False)
    assert again.generated == 0 and again.already_done == 7


def test_a_limit_runs_one_process_and_bad_counts_are_refused(setup: dict[str, Path],
                                                             tmp_path: Path) -> None:
    profile = RunProfile.load(setup["fast"])
    first = run_with_workers(profile, setup["cohort"], tmp_path / "x", workers=2, limit=3,
                             progress=False)
    records = read_records(tmp_path / "x")
    assert first.generated == 3 and len(records) == 3
    # the first three cohort rows, in one process with the workers' thread count
    assert [r.row_id for r in records] == [r.row_id for r in read_cohort(setup["cohort"])[:3]]
    threads = worker_profile(profile, 2).backend_options["threads"]
    assert all("threads" not in r.provenance.backend_config for r in records)
    assert f"{threads} torch thread(s)" in (tmp_path / "x" / "run.log").read_text()
    rest = run_with_workers(profile, setup["cohort"], tmp_path / "x", workers=2, progress=False)
    assert rest.already_done == 3
    with pytest.raises(InputError, match="workers"):
        run_with_workers(profile, setup["cohort"], tmp_path / "x", workers=0)


@pytest.mark.parametrize(
    ("line", "field"),
    [("workers = 0", "workers"), ("workers = true", "workers"),
     ('sort_by_length = "yes"', "sort_by_length")],
)
def test_profile_keys_are_checked(setup: dict[str, Path], tmp_path: Path, line: str,
                                  field: str) -> None:
    path = tmp_path / "bad.toml"
    text = setup["fast"].read_text(encoding="utf-8").replace("sort_by_length = true\n", "")
    path.write_text(f"{line}\n{text}", encoding="utf-8")
    with pytest.raises(InputError) as exc:
        RunProfile.load(path)
    assert exc.value.field == field and str(path) in str(exc.value)


def test_physical_cores_is_within_the_allowed_cpus() -> None:
    assert 1 <= physical_cores() <= len(os.sched_getaffinity(0))


def test_the_toy_profile_is_the_fast_one() -> None:
    root = Path(__file__).resolve().parents[1]
    profile = RunProfile.load(root / "runners" / "toy-hf.toml")
    assert profile.workers == 2 and profile.sort_by_length
    assert profile.backend_options["decode_loop"] == "lean"
    assert profile.backend_options["threads"] == "auto"


@pytest.mark.parametrize(("cores", "workers", "threads"),
                         [(2, 1, 1), (2, 2, 1), (1, 1, 1), (4, 1, 3), (4, 2, 1), (16, 1, 15),
                          (16, 2, 7), (16, 4, 3), (16, 32, 1)])
def test_auto_threads_leave_a_core_to_the_machine(cores: int, workers: int,
                                                  threads: int) -> None:
    """(cores - 1) // workers, at least 1: a process never needs every core."""
    from guardrepro.run.workers import auto_threads

    assert auto_threads(workers, cores) == threads
    assert workers * auto_threads(workers, cores) <= max(cores - 1, workers)


def test_another_worker_count_reuses_an_interrupted_runs_records(setup: dict[str, Path],
                                                                 tmp_path: Path) -> None:
    """``--workers 1`` with 2 threads after an interrupted ``--workers 2`` with 1
    thread each (its shard runs left as the workers leave them) reuses every
    record they finished; the original command then still works."""
    two = tmp_path / "two-threads.toml"
    two.write_text(setup["fast"].read_text(encoding="utf-8").replace(
        "threads = 1", "threads = 2"), encoding="utf-8")
    profile = RunProfile.load(two)
    first = RunProfile.load(setup["fast"])  # threads = 1
    shards = tmp_path / ".run.workers"
    for k in (1, 2):  # two rows each, then the run was stopped
        run_cohort(worker_profile(first, 2), setup["cohort"], shards / f"{k}-of-2" / "run",
                   shard=f"{k}/2", limit=2, progress=False)
    finished = {r.row_id: r for d in shards.glob("*/run") for r in read_records(d)}
    assert len(finished) == 4
    out = tmp_path / "run"
    summary = run_with_workers(profile, setup["cohort"], out, workers=1, progress=False)
    assert summary.already_done == 4 and summary.generated == 3 and summary.remaining == 0
    assert _content(out) == _content(setup["reference"])
    kept = {r.row_id: r for r in read_records(out) if r.row_id in finished}
    assert kept == finished  # the very records, not generated again
    assert not shards.exists()
    again = run_with_workers(first, setup["cohort"], out, workers=2, progress=False)
    assert again.generated == 0 and again.already_done == 7


def _worker_lines(run_dir: Path) -> dict[str, tuple[int, int]]:
    """Each worker's (rows generated, rows already recorded), from the run's log."""
    found = re.findall(r"worker (\d/\d) \(pid \d+\): (\d+) row\(s\) generated, (\d+) already",
                       (run_dir / "run.log").read_text(encoding="utf-8"))
    return {shard: (int(made), int(kept)) for shard, made, kept in found}


@pytest.mark.slow  # spawns worker processes
def test_workers_split_the_rows_by_size_and_resume_without_making_one_twice(
        setup: dict[str, Path], tmp_path: Path) -> None:
    """A row larger than the six others together is made alone by the first
    worker (largest first, to the least loaded). An interrupted run whose first
    worker recorded three small rows resumes with the four others split anew:
    the large one to that worker, three to the second; nothing is made twice and
    the three records are kept as they were."""
    lines = [cohort_row(i) for i in range(7)]
    lines[2]["sample"]["instruction"] += " please check the calendar" * 200
    sizes = [len(json.dumps(line["sample"], ensure_ascii=False, sort_keys=True))
             for line in lines]
    assert sizes[2] > sum(sizes) - sizes[2]
    cohort = tmp_path / "cohort.jsonl"
    cohort.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    profile = RunProfile.load(setup["fast"])
    run_cohort(profile, cohort, tmp_path / "one", progress=False)
    want = _content(tmp_path / "one")

    run_with_workers(profile, cohort, tmp_path / "split", workers=2, progress=False)
    assert _worker_lines(tmp_path / "split") == {"1/2": (1, 0), "2/2": (6, 0)}
    assert _content(tmp_path / "split") == want

    first = tmp_path / ".resumed.workers" / "1-of-2" / "resumed"
    run_cohort(worker_profile(profile, 2), cohort, first, only={"row000", "row001", "row003"},
               progress=False)
    kept = {r.row_id: r for r in read_records(first)}
    summary = run_with_workers(profile, cohort, tmp_path / "resumed", workers=2,
                               progress=False)
    assert (summary.already_done, summary.generated, summary.remaining) == (3, 4, 0)
    assert _worker_lines(tmp_path / "resumed") == {"1/2": (1, 3), "2/2": (3, 0)}
    assert _content(tmp_path / "resumed") == want
    assert {r.row_id: r for r in read_records(tmp_path / "resumed") if r.row_id in kept} == kept
