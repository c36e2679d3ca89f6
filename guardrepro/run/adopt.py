"""Records of an interrupted ``run --workers`` reused by a run with other workers.

Input: a run directory ``out`` without a manifest yet, and the shard runs that
an interrupted ``run --workers M`` left in ``.<name>.workers/<k>-of-<M>/<name>``.
Output: those shards' records merged into ``out`` (``merge.merge_runs`` with
``allow_partial``: same provenance, cohort order, nothing duplicated) and the
shard folder removed, so that a run with another worker count, or in one
process, resumes from them instead of starting again.

Invariants: only when the worker count changes (or the run goes to one
process); the same ``--workers M`` resumes each worker's run where it
stopped (``run.workers``). A
shard folder that holds no record is dropped; one whose records cannot be
merged (another provenance, another cohort) is an error naming it, and
nothing is moved. Settings that never change a token (workers, threads) are
not part of the provenance (docs/PROTOCOL.md), so the records carry over.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

from guardrepro.artifacts.nofollow import refuse_links
from guardrepro.errors import InputError
from guardrepro.rundir.manifest import MANIFEST_FILE
from guardrepro.rundir.records import RECORDS_FILE

log = logging.getLogger(__name__)
LOG_FILE = "run.log"


def shard_base(out: Path) -> Path:
    """The folder of ``out``'s worker shards, beside it."""
    return out.parent / f".{out.name}.workers"


def _shard_runs(out: Path) -> dict[int, list[Path]]:
    """Worker count -> the shard run directories of that count that hold records."""
    found: dict[int, list[Path]] = {}
    base = shard_base(out)
    for entry in sorted(base.iterdir()) if base.is_dir() else ():
        match = re.fullmatch(r"(\d+)-of-(\d+)", entry.name)
        run = entry / out.name
        refuse_links(run / RECORDS_FILE, trusted=out.parent)
        if match and (run / RECORDS_FILE).is_file() and (run / RECORDS_FILE).stat().st_size:
            found.setdefault(int(match.group(2)), []).append(run)
    return found


def adopt_shards(out: Path, workers: int, cohort: Path, *, one_process: bool) -> int:
    """Merge the records of shards of another worker count into ``out`` (see the
    module docstring); the number of records adopted (0: nothing to do)."""
    from guardrepro.run.merge import merge_runs

    if (out / MANIFEST_FILE).exists() or not shard_base(out).is_dir():
        return 0
    found = _shard_runs(out)
    counts = [n for n in found if one_process or n != workers]
    if not counts:
        return 0
    if len(found) > 1:
        raise InputError(
            f"shards of runs with {', '.join(map(str, sorted(found)))} workers are all "
            "present; remove the folders of the ones not to keep", file=str(shard_base(out)))
    runs = found[counts[0]]
    report = merge_runs(runs, out, cohort_path=cohort, allow_partial=True)
    base = shard_base(out)
    if (base / LOG_FILE).is_file() and not (out / LOG_FILE).exists():
        os.replace(base / LOG_FILE, out / LOG_FILE)  # the interrupted run's lines kept
    shutil.rmtree(base)
    log.info("run %s: %d record(s) of an interrupted %d-worker run reused", out,
             report.merged_rows, counts[0])
    return int(report.merged_rows)

