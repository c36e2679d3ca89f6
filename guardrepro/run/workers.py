"""``guardrepro run --workers N``: one run, N worker processes on one machine.

Input: a run profile, a cohort file, a run directory and ``workers``.
Output: the run directory holding every selected row's record in cohort order
(``guardrepro.run.merge``), and a ``pipeline.RunSummary`` for the whole run.

Invariants:

- The parent splits the rows that no worker's directory has recorded yet
  between the workers (``split_rows``: ``run.balance``, balanced on the
  rows' sizes, deterministic). Worker ``k`` makes its rows with
  ``pipeline.run_cohort`` (``only``: a run of the whole cohort that makes
  these rows) into ``.<name>.workers/<k>-of-<N>/<name>`` beside the run
  directory, so its records carry the run directory's name as run id. The
  worker runs are merged into the run directory with ``merge.merge_runs``
  (same provenance, cohort order, nothing missing, no row twice) and removed
  only after the merge is in place; an interrupted run keeps them, and
  rerunning the same command resumes: each worker keeps what it recorded,
  and the rows left are split anew.
- Every worker gets the same profile, so the same provenance: for the hf
  backend, threads ``"auto"`` (or unset) becomes ``auto_threads(N)`` =
  ``max(1, (physical cores - 1) // N)`` for each worker, fixed before the
  workers start (threads are part of the provenance). A run directory that
  already holds a run (a finished or partly resumed merge) is resumed in one
  process with that same profile.
- The parent resolves the profile once (``run.resolve.resolve_handoff``: each
  lock read and verified once, the tree hash computed once; no tokenizer
  loaded) and hands every worker the result as a ``run.resolve.Handoff``
  (our own paths, hashes and options; nothing from upstream is pickled). A
  worker rebuilds its objects with ``Handoff.resolve``: it reads no lock and
  verifies nothing, and loads only the tokenizer (checking the guard's
  special tokens) and the template, from the verified paths.
- Start method: for the hf backend on Linux, ``fork``, after the parent has
  imported the runner's module (torch, transformers) once: each worker then
  starts with those imports done instead of paying them itself (on the
  2-core development machine two workers importing torch side by side were
  most of a 64-row run's wall time). Nothing else is inherited that matters:
  the parent has loaded no model, opened no tokenizer and started no torch
  thread pool by then (``guardrepro run`` runs no tensor op first). Other
  backends, and other systems (macOS: fork is unsafe with Apple's
  frameworks), use ``spawn``: no state inherited from the parent. Each
  worker loads its runner, then waits at a barrier until all have, so they
  generate side by side (and the run's
  generation span, ``RunSummary.generation_started`` to ``_finished``, is
  not a measure of how long one process took to import torch); a worker that
  fails before the barrier breaks it, releasing the others. A worker's
  ``GuardreproError`` is re-raised in the parent with its class and message;
  any other failure becomes an ``InferenceError`` naming the shard.
- Each worker tells the parent of the rows it finished (a queue); the parent
  draws one bar over the whole cohort (a line now and then when stderr is not
  a terminal: ``guardrepro.progress``). Ctrl-C reaches the parent only (the
  workers start with SIGINT blocked); the parent terminates every worker and
  re-raises, so ``run`` exits 130 within ``STOP_TIMEOUT_S``. SIGTERM and SIGHUP
  to the parent do the same (``cli.interrupts``: exit 143, 129); in a worker
  they end it at once. On Linux a worker also dies with its parent, even one
  killed with SIGKILL (``die_with_parent``: ``PR_SET_PDEATHSIG``).
- A worker logs through the same queue (``logs.to_queue``): the parent hands
  each record to its own handlers, so a worker's lines (its start and summary,
  transformers' records, captured print lines) reach the parent's stderr at
  its level and the run's ``run.log``, each naming the worker's pid.
- ``--limit N`` runs the first N rows in one process (a limit per shard would
  not be the first N rows of the cohort), with the workers' per-process
  settings, so that the same run later resumes under one provenance.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from guardrepro import errors, logs
from guardrepro.artifacts.nofollow import make_dirs, refuse_links
from guardrepro.errors import GuardreproError, InferenceError, InputError
from guardrepro.logs import run_log
from guardrepro.run.adopt import adopt_shards
from guardrepro.run.balance import balanced_split, row_size
from guardrepro.run.profile import RunProfile
from guardrepro.run.resolve import Handoff, resolve_handoff
from guardrepro.run.runners.backends import Backend
from guardrepro.run.runners.registry import preload, runner_class
from guardrepro.rundir.leftovers import refused_leaves_nothing
from guardrepro.rundir.manifest import MANIFEST_FILE
from guardrepro.rundir.records import RECORDS_FILE
from guardrepro.rundir.shard import format_shard

log = logging.getLogger(__name__)
LOG_FILE = "run.log"


def physical_cores() -> int:
    """Physical cores among the CPUs this process may run on (hyperthread
    siblings counted once; Linux topology files, else the CPU count)."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    if allowed is None:
        return max(1, os.cpu_count() or 1)
    cores: set[tuple[str, str]] = set()
    for cpu in allowed:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            core = (topology / "core_id").read_text().strip()
            package = (topology / "physical_package_id").read_text().strip()
        except OSError:
            package, core = "cpu", str(cpu)
        cores.add((package, core))
    return max(1, len(cores))


def auto_threads(workers: int, cores: int | None = None) -> int:
    """Torch threads for each of ``workers`` processes under ``threads = "auto"``:
    ``(physical cores - 1) // workers``, at least 1. One core is left to the rest
    of the machine: a process whose threads need every core stalls at each
    parallel region whenever any other job takes one of them (measured on the
    shared 2-core machine: one process with 2 threads ran 8-15x slower than
    with 1 at load 10-15, and at most ~1.3x faster when idle; docs/THROUGHPUT.md).
    The count is fixed before the run starts (it is part of the provenance),
    so it cannot follow the load; more cores are used through more workers."""
    available = physical_cores() if cores is None else cores
    return max(1, (available - 1) // max(1, workers))


def worker_profile(profile: RunProfile, workers: int) -> RunProfile:
    """The profile each worker runs: threads (a backend that declares the option
    ``threads``: hf) fixed by ``auto_threads``."""
    if "threads" not in profile.descriptor.options.names:
        return profile
    threads = profile.backend_options.get("threads")
    if threads is None or threads == "auto":
        return profile.with_backend_options(threads=auto_threads(workers))
    return profile


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """SIGINT (and SIGTERM, SIGHUP) held back while the runner's libraries import:
    a KeyboardInterrupt raised inside an import can be swallowed by the library
    and leave a half initialised module, which forked workers would inherit
    (they then fail to import the model class). A signal meanwhile is delivered
    as soon as the block ends, as a KeyboardInterrupt in this process."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, *STOPPING})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP noted while the block runs and acted on when it
    ends, as this process's handlers would have. A mask is not enough here: once
    the pool's own thread runs, a signal reaches the process through it, and
    Python runs the handler in the main thread whatever its mask; raised in the
    middle of starting a spawned worker, it left that worker without its start-up
    data (a traceback on stderr)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {n: signal.signal(n, lambda signum, frame: caught.append(signum))
                for n in (signal.SIGINT, *STOPPING)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    if caught:
        handler = previous[signal.Signals(caught[0])]
        if callable(handler):
            handler(caught[0], None)
        elif handler == signal.SIG_DFL:
            os.kill(os.getpid(), caught[0])


def start_method(backend: Backend, checkpoint_dir: Path | None = None,
                 options: Mapping[str, Any] | None = None) -> str:
    """``fork`` after importing the runner's module in this process (a backend
    whose descriptor is ``fork_safe``, hf, on Linux), and with
    ``checkpoint_dir`` what loading it with ``options`` imports
    (``registry.preload``: the model class's modules, unless the lean decoder
    reads the weights itself), else ``spawn`` (see the module docstring)."""
    if backend.fork_safe and sys.platform.startswith("linux") \
            and "fork" in multiprocessing.get_all_start_methods():
        with _sigint_deferred():  # the imports every worker would otherwise repeat
            if checkpoint_dir is None:
                runner_class(backend)
            else:
                preload(backend, checkpoint_dir, options or {})
        return "fork"
    return "spawn"


def _shard_dirs(run_dir: Path, workers: int) -> list[Path]:
    base = run_dir.parent / f".{run_dir.name}.workers"
    return [base / f"{k}-of-{workers}" / run_dir.name for k in range(1, workers + 1)]


def recorded_ids(path: Path, trusted: Path) -> frozenset[str]:
    """The row ids of the whole lines of the records file ``path`` (none when it
    is absent; a symlink on the way is refused). A torn last line is no record:
    its worker's writer drops it and the row is made again. A line that is not
    a record is left to the worker that owns the file, which refuses it,
    naming the line, as it opens the file."""
    refuse_links(path, trusted=trusted)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return frozenset()
    ids = set()
    for line in data.split(b"\n")[:-1]:  # what follows the last newline is no line
        try:
            ids.add(str(json.loads(line)["row_id"]))
        except (ValueError, KeyError, TypeError):
            continue
    return frozenset(ids)


def split_rows(rows: Sequence[Any], recorded: Sequence[frozenset[str]]) -> list[frozenset[str]]:
    """The row ids each worker makes: the cohort ``rows`` that no worker's
    directory has recorded (``recorded``, one set per worker), split by
    ``balance.balanced_split`` on ``balance.row_size``."""
    done = frozenset().union(*recorded)
    todo = [row for row in rows if row.row_id not in done]
    return [frozenset(row.row_id for row in part)
            for part in balanced_split(todo, len(recorded), row_size)]


_BARRIER: Any = None  # set in each worker process by _init
_PROGRESS: Any = None  # the parent's progress queue, set by _init
BARRIER_TIMEOUT_S = 3600.0
PR_SET_PDEATHSIG = 1  # linux/prctl.h
STOPPING = (signal.SIGTERM, signal.SIGHUP)
BROKEN = "another worker failed before generating"
STOP_TIMEOUT_S = 5.0


def _init(barrier: Any, progress: Any, level: int, parent: int) -> None:
    global _BARRIER, _PROGRESS
    _BARRIER, _PROGRESS = barrier, progress
    # SIGTERM and SIGHUP end a worker at once (its records are whole lines, its
    # lock goes with it); SIGINT stays blocked (the parent handles Ctrl-C)
    for number in STOPPING:
        signal.signal(number, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(STOPPING))
    die_with_parent(parent)
    logs.to_queue(progress, level)  # log records travel with the row counts


def die_with_parent(parent: int) -> None:
    """Linux: this process gets SIGKILL when its parent dies, even by ``kill -9``
    (``PR_SET_PDEATHSIG``), so no worker outlives its run; one whose parent is
    already gone exits now."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # died before the line above took effect
        os._exit(1)


def _report(rows: int) -> None:
    """Tell the parent that ``rows`` more rows of this worker are done."""
    if _PROGRESS is not None and rows:
        _PROGRESS.put(rows)


def _ready() -> None:
    if _BARRIER is not None:
        _BARRIER.wait(BARRIER_TIMEOUT_S)


def _work(handoff: Handoff, cohort: Path, out: Path, shard: str, trusted: Path,
          only: frozenset[str]) -> Any:
    """Worker ``shard`` ("k/N"; runs in a worker process) making the rows ``only``:
    its summary, or the error."""
    from threading import BrokenBarrierError

    from guardrepro.run.pipeline import run_cohort

    try:
        resolved = handoff.resolve()
        logs.adopt_libraries()  # transformers, when resolving imported it (spawn)
        log.info("worker %s (pid %d): started on %s", shard, os.getpid(), cohort.name)
        summary = run_cohort(resolved, cohort, out, progress=False, on_ready=_ready,
                             on_rows=_report, trusted=trusted, only=only)
        log.info("worker %s (pid %d): %d row(s) generated, %d already recorded; %.1f s",
                 shard, os.getpid(), summary.generated, summary.already_done,
                 summary.elapsed_s)
        return summary
    except GuardreproError as exc:
        if _BARRIER is not None:
            _BARRIER.abort()
        return ("error", type(exc).__name__, str(exc))
    except BrokenBarrierError:
        return ("error", "InferenceError", BROKEN)
    except BaseException:
        if _BARRIER is not None:
            _BARRIER.abort()
        raise


def _raise(out: Path, shard: str, kind: str, message: str) -> None:
    """Re-raise a worker's error in the parent, naming the run it was part of."""
    cls = getattr(errors, kind, None)
    if isinstance(cls, type) and issubclass(cls, GuardreproError):
        raise cls(f"run {out}: worker {shard}: {message}")
    raise InferenceError(f"run {out}: worker {shard}: {kind}: {message}")


def _run_pool(handoff: Handoff, cohort: Path, out: Path, dirs: list[Path], shards: list[str],
              progress: bool, method: str) -> list[Any]:
    """Run the shards in worker processes started by ``method`` (``start_method``);
    one bar in this process sums their rows.

    The workers start with SIGINT blocked (the mask is inherited through spawn and
    fork alike), so
    Ctrl-C reaches this process alone: it terminates every worker, waits for them
    (``STOP_TIMEOUT_S``, then SIGKILL) and re-raises, so ``run`` exits 130 at once
    instead of waiting on idle workers. Records already appended stay; rerunning
    resumes every shard.
    """
    from guardrepro.progress import progress_bar
    from guardrepro.rundir.cohort import read_cohort

    context = multiprocessing.get_context(method)
    queue = context.SimpleQueue()
    rows = read_cohort(cohort)
    bar = progress_bar(len(rows), f"run {out.name}", "row", enabled=progress)
    assigned = split_rows(rows, [recorded_ids(d / RECORDS_FILE, out.parent) for d in dirs])
    pool = ProcessPoolExecutor(max_workers=len(shards), mp_context=context,
                               initializer=_init, initargs=(context.Barrier(len(shards)), queue,
                                         logging.getLogger().getEffectiveLevel(), os.getpid()))
    try:
        # a worker inherits the mask (SIGINT stays blocked there)
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            with _signals_held():  # no worker is left half started
                futures = [pool.submit(_work, handoff, cohort, d, s, out.parent, only)
                           for d, s, only in zip(dirs, shards, assigned, strict=True)]
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        while wait(futures, timeout=0.2).not_done:
            _drain(queue, bar)
        _drain(queue, bar)
        results = [f.result() for f in futures]
    except BaseException:
        _stop(pool)
        raise
    finally:
        bar.close()
    pool.shutdown()
    return results


def _drain(queue: Any, bar: Any) -> None:
    """Rows done (an int) to the bar, a worker's log record to our handlers."""
    while not queue.empty():
        item = queue.get()
        if isinstance(item, logging.LogRecord):
            logs.handle(item)
        else:
            bar.update(item)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Terminate every worker of ``pool`` now (SIGTERM, then SIGKILL) and drop the pool."""
    processes = list(getattr(pool, "_processes", {}).values())
    for process in processes:
        process.terminate()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()
    pool.shutdown(wait=False, cancel_futures=True)


def run_with_workers(
    profile: RunProfile,
    cohort_path: str | Path,
    run_dir: str | Path,
    *,
    workers: int,
    limit: int | None = None,
    progress: bool = True,
    home: str | Path | None = None,
) -> Any:
    """Run the cohort with ``workers`` processes (see the module docstring); the
    run's log lines (start, progress lines, summary) go to ``<run_dir>/run.log``."""
    from guardrepro.run.pipeline import run_cohort

    if workers < 1:
        raise InputError(f"workers must be >= 1, got {workers}", field="workers")
    cohort = Path(cohort_path).resolve()
    out = Path(run_dir).resolve()
    start = ("run %s: profile %s, cohort %s, %d worker(s)%s", out, profile.name, cohort,
             workers, "" if limit is None else f", first {limit} rows")
    shared = worker_profile(profile, workers)
    # an interrupted run with another worker count: its records merged into out
    adopt_shards(out, workers, cohort, one_process=workers == 1 or limit is not None)
    one_process = (profile if workers == 1 else shared) if (
        workers == 1 or limit is not None or (out / MANIFEST_FILE).is_file()) else None
    if one_process is not None:
        # --limit: a few rows in one process, with the workers' settings so that the
        # run resumes later under the same provenance; an existing run: resumed so
        # refused before its first record: no run.log, no directory left behind
        with refused_leaves_nothing(out, LOG_FILE, records=[out / RECORDS_FILE]), run_log(
                out / LOG_FILE):
            log.info(*start)
            summary = run_cohort(one_process, cohort, out, limit=limit, progress=progress,
                                 home=home)
            log_summary(summary)
        return summary
    shard_records = [d / RECORDS_FILE for d in _shard_dirs(out, workers)]
    base = shard_records[0].parent.parent.parent
    with refused_leaves_nothing(out, records=shard_records), refused_leaves_nothing(
            base, LOG_FILE, records=shard_records):
        out.mkdir(parents=True, exist_ok=True)  # an unwritable --out is named as such
        # (merge replaces this empty directory)
        make_dirs(base, trusted=out.parent)  # a symlink planted on the way is refused
        for shard_dir in _shard_dirs(out, workers):
            refuse_links(shard_dir / RECORDS_FILE, trusted=out.parent)
        with run_log(base / LOG_FILE, trusted=out.parent):
            log.info(*start)
            summary = _run_shards(shared, cohort, out, workers, progress, home)
            log_summary(summary)
    os.replace(base / LOG_FILE, out / LOG_FILE)
    shutil.rmtree(base)
    return summary


def log_summary(summary: Any) -> None:
    log.info("run %s: %d row(s) generated, %d already recorded, %d remaining, %s; %.1f s",
             summary.run_dir, summary.generated, summary.already_done, summary.remaining,
             dict(sorted(summary.counts.items())), summary.elapsed_s)
    if summary.generated:  # the span benchmarks read (scripts/bench_runners.py)
        log.info("run %s: generation span %.3f s (epoch %.3f to %.3f)", summary.run_dir,
                 summary.generation_finished - summary.generation_started,
                 summary.generation_started, summary.generation_finished)


def _run_shards(shared: RunProfile, cohort: Path, out: Path, workers: int, progress: bool,
                home: str | Path | None) -> Any:
    """The shards in worker processes, merged into ``out``; their RunSummary."""
    from guardrepro.run.merge import merge_runs
    from guardrepro.run.pipeline import RunSummary

    started = time.perf_counter()
    handoff = resolve_handoff(shared, home=home)  # read and verified once, here
    dirs = _shard_dirs(out, workers)
    shards = [format_shard(k, workers) for k in range(1, workers + 1)]
    results = _run_pool(handoff, cohort, out, dirs, shards, progress,
                        start_method(shared.descriptor, handoff.checkpoint_dir,
                                     shared.backend_options))
    failed = [(s, r) for s, r in zip(shards, results, strict=True) if isinstance(r, tuple)]
    failed.sort(key=lambda item: item[1][2] == BROKEN)  # the cause before its echoes
    for shard, result in failed:
        _raise(out, shard, result[1], result[2])
    merge_runs(dirs, out, cohort_path=cohort)
    counts: dict[str, int] = {}
    for result in results:
        for status, count in result.counts.items():
            counts[status] = counts.get(status, 0) + count
    return RunSummary(  # each worker's run is of the whole cohort, and holds a part of it
        run_dir=out,
        run_id=out.name,
        rows_in_cohort=results[0].rows_in_cohort,
        rows_selected=results[0].rows_selected,
        already_done=sum(r.already_done for r in results),
        generated=sum(r.generated for r in results),
        remaining=results[0].rows_selected - sum(counts.values()),
        counts=counts,
        elapsed_s=time.perf_counter() - started,
        generation_started=min(r.generation_started for r in results),
        generation_finished=max(r.generation_finished for r in results),
    )
