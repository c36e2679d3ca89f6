"""One guard on a whole split at full size: 7,000 synthetic rows, the rule guard
(no model). Resume, ``--workers`` and the progress bar hold at this size and the
table's figures are scikit-learn's. Speed and memory ratios are printed by
``scripts/bench_split_scale.py`` (docs/THROUGHPUT.md), not asserted here.

The run directories go to /dev/shm when it exists, so the disk is not
what is timed."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sklearn.metrics import accuracy_score, f1_score, recall_score

from guardrepro.bench.cohort.build import write_cohort
from guardrepro.bench.cohort.split import build_split, load_split_spec
from guardrepro.bench.tsbench import load_benchmark
from guardrepro.checks.parity.toolsafe_table import load_source, split_predictions
from guardrepro.checks.stats.toolsafe_metrics import view_metrics
from guardrepro.run.pipeline import run_cohort
from guardrepro.run.profile import RunProfile
from guardrepro.run.workers import run_with_workers
from guardrepro.rundir.cohort import read_cohort
from guardrepro.rundir.records import read_records
from scripts.bench_split_scale import RULE, synthetic_rows, write_split

ROWS = 7000

pytestmark = pytest.mark.slow  # about half a minute on two shared cores


@pytest.fixture
def fast_dir(tmp_path: Path) -> Iterator[Path]:
    shm = Path("/dev/shm")
    path = Path(tempfile.mkdtemp(dir=shm)) if shm.is_dir() else tmp_path / "runs"
    path.mkdir(exist_ok=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_synthetic_rows_are_seeded_and_shaped_like_asb() -> None:
    rows = synthetic_rows(90)
    assert rows == synthetic_rows(90) and rows != synthetic_rows(90, seed=8)
    assert [len(v) for v in rows.values()] == [45, 30, 15]


def test_seven_thousand_rows_resume_workers_progress_and_table(
    tmp_path: Path, fast_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    spec = write_split(tmp_path / "data", ROWS)
    build = build_split(load_split_spec(spec), tmp_path / "data", pinned=False)
    cohort = fast_dir / "split.jsonl"
    write_cohort(build, cohort)
    ids = [row.row_id for row in read_cohort(cohort)]
    assert len(ids) == len(set(ids)) == ROWS

    capfd.readouterr()
    first = run_cohort(RULE, cohort, fast_dir / "run", limit=500, progress=True)
    assert (first.generated, first.remaining) == (500, ROWS - 500)
    assert "500/500" in capfd.readouterr().err  # the bar drew to the end
    rest = run_cohort(RULE, cohort, fast_dir / "run", progress=True)
    assert (rest.already_done, rest.generated, rest.remaining) == (500, ROWS - 500, 0)
    assert f"{ROWS - 500}/{ROWS - 500}" in capfd.readouterr().err
    records = read_records(fast_dir / "run")
    assert [r.row_id for r in records] == ids

    run_with_workers(RunProfile.load(RULE), cohort, fast_dir / "workers", workers=2,
                     progress=False)
    parallel = read_records(fast_dir / "workers")
    assert [(r.row_id, r.score) for r in parallel] == [(r.row_id, r.score) for r in records]

    bench = load_benchmark(tmp_path / "data", "asb")
    preds = split_predictions(load_source(fast_dir / "run", bench, "asb"), bench)
    m = view_metrics(preds, "strict", "upstream", replicates=200)
    gold = [int(p.gold != 0) for p in preds if p.pred is not None]
    pred = [int(p.pred != 0) for p in preds if p.pred is not None]
    assert m.kept == len(gold) == ROWS
    assert m.accuracy.point == pytest.approx(accuracy_score(gold, pred))
    assert m.f1.point == pytest.approx(f1_score(gold, pred))
    assert m.recall.point == pytest.approx(recall_score(gold, pred))
