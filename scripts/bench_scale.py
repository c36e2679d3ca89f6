"""A million rule rows: run, interrupt, resume and ``stats``, with rows/s and peak memory.

Input: ``--rows`` (default 1,000,000), ``--baseline-rows`` (default 50,000:
the fsync comparison), ``--interrupt-after`` (default: a third of the rows),
``--dir`` (default a fresh directory under the system temp dir, which is on
the disk here: the records' fsyncs are part of what is measured).

What runs, each step its own ``python -m guardrepro`` process, so its peak
resident memory (``wait4``'s ``ru_maxrss``) is its own:

1. a synthetic ASB-shaped split (``scripts.bench_split_scale``): 10,000 rows
   built into a cohort with ``cohort build``, then repeated under new ids up
   to ``--rows`` (written a line at a time);
2. the fsync baseline on the first ``--baseline-rows`` rows: ``run`` with one
   fsync per record (``GUARDREPRO_RECORDS_SYNC_ROWS=1``, the writer before
   batching) and with the default batches, interleaved (batched, per-record,
   batched) into fresh directories;
3. ``run`` of every row, interrupted with SIGINT once ``--interrupt-after``
   records are in the file (exit 130 expected), then the same command, which
   resumes and finishes;
4. ``stats`` of the finished run;
5. with ``--verify-files N`` (N > 0), ``lock`` of a directory of N small files
   (1,000 a sub-directory) and ``verify`` of that lock twice (the second finds
   every verification stamp in place), in a cache of its own under the
   benchmark directory; with ``--baseline-tree DIR`` (a checkout of another
   version, e.g. ``git archive main | tar -x -C DIR``) that version's
   ``verify`` runs before each of these, in its own cache, and the ratios
   (wall and CPU seconds, this / baseline) are printed;
6. with ``--only-merge`` instead of all the above: the cohort, ``run --shard
   1/2`` and ``2/2`` of it, then ``merge`` of the two runs (the merge of
   ``run --workers 2``), with ``--baseline-tree`` that checkout's merge first,
   the two merged files compared byte for byte.

Output: a table on stdout (seconds, rows, rows/s, peak MB per step) and the
ratios: per-record / batched fsync seconds on the baseline rows; the resume's
seconds per row it generated against the first run's. The machine is shared:
the load average before and after is printed; read the ratios.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.bench_split_scale import RULE, write_split  # noqa: E402

BASE_ROWS = 10_000


CPU: dict[str, float] = {}  # CPU seconds (user + system) of each verify step


def _proc(args: list[str], env: dict[str, str], tree: Path = ROOT) -> subprocess.Popen[bytes]:
    # SIGINT at its default: a shell's background job inherits it ignored, and a
    # Python started so never raises KeyboardInterrupt; ``tree``: the checkout
    # whose guardrepro runs (``-m`` puts the working directory first on sys.path)
    return subprocess.Popen([sys.executable, "-m", "guardrepro", *args], cwd=tree,
                            env={**os.environ, "PYTHONPATH": str(tree), **env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait(proc: subprocess.Popen[bytes], start: float, ok: tuple[int, ...] = (0,),
          cpu: str = "") -> tuple[float, float]:
    """Seconds since ``start`` and peak RSS (MB) of ``proc``, once it exits
    (its CPU seconds into ``CPU[cpu]`` when ``cpu`` is given)."""
    _, status, usage = os.wait4(proc.pid, 0)
    if cpu:
        CPU[cpu] = usage.ru_utime + usage.ru_stime
    seconds = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code
    if code not in ok:
        err = proc.stderr.read().decode() if proc.stderr is not None else ""
        raise SystemExit(f"{proc.args!r} exited {code}:\n{err[-3000:]}")
    return seconds, usage.ru_maxrss / 1024


def step(args: list[str], env: dict[str, str] | None = None, tree: Path = ROOT,
         cpu: str = "") -> tuple[float, float]:
    start = time.perf_counter()
    return _wait(_proc(args, env or {}, tree), start, cpu=cpu)


def _count(path: Path) -> int:
    if not path.exists():
        return 0
    with open(path, "rb") as fh:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 22), b""))


def make_cohort(base: Path, rows: int) -> Path:
    """``rows`` cohort rows: a built split of ``BASE_ROWS`` rows, repeated under new ids."""
    spec = write_split(base / "data", BASE_ROWS)
    small = base / "split-small.jsonl"
    step(["cohort", "build", str(spec), "--data-dir", str(base / "data"), "--out", str(small),
          "--unpinned", "--no-progress"])
    lines = small.read_text(encoding="utf-8").splitlines()
    cohort = base / f"cohort-{rows}.jsonl"
    with open(cohort, "w", encoding="utf-8") as out:
        for i in range(rows):
            row = json.loads(lines[i % len(lines)])
            new = f"s{i:011d}"
            row["base_sample_id"] = new
            for key in ("sample_id", "trajectory_id"):
                row["sample"][key] = new
            out.write(json.dumps(row, ensure_ascii=False, sort_keys=True,
                                 separators=(",", ":")) + "\n")
    return cohort


def interrupted(args: list[str], records: Path, after: int) -> tuple[float, float, int]:
    """Run ``args``, SIGINT it once ``after`` records are in ``records``; seconds,
    peak MB and the records kept."""
    start = time.perf_counter()
    proc = _proc(args, {})
    while proc.poll() is None and _count_fast(records) < after:
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    seconds, peak = _wait(proc, start, ok=(130, 0))
    return seconds, peak, _count(records)


def _count_fast(path: Path) -> int:
    """Records in the file, estimated from its size (the first line's length)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            first = len(fh.readline())
    except OSError:
        return 0
    return size // first if first else 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--baseline-rows", type=int, default=50_000)
    parser.add_argument("--interrupt-after", type=int, default=None)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--verify-files", type=int, default=0)
    parser.add_argument("--only-verify", action="store_true",
                        help="skip the run steps: only the --verify-files steps")
    parser.add_argument("--only-merge", action="store_true",
                        help="only: --rows rows run as shards 1/2 and 2/2, then `merge` of"
                             " the two (with --baseline-tree: that checkout's merge first)")
    parser.add_argument("--baseline-tree", type=Path, default=None,
                        help="a checkout (e.g. `git archive main`) whose verify runs"
                             " interleaved with this one's, each with a cache of its own")
    args = parser.parse_args(argv)
    after = args.interrupt_after or args.rows // 3
    if not 0 < after < args.rows or not 0 < args.baseline_rows <= args.rows:
        parser.error("need 0 < --interrupt-after < --rows and 0 < --baseline-rows <= --rows")
    base = args.dir or Path(tempfile.mkdtemp(prefix="bench-scale-"))
    base.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    results: dict[str, tuple[float, float, int]] = {}
    if args.only_verify or args.only_merge:
        if args.only_merge:
            merge_steps(base, args.rows, results, args.baseline_tree)
        else:
            verify_steps(base, args.verify_files, results, args.baseline_tree)
        report(results, args, base, load_before)
        return
    start = time.perf_counter()
    cohort = make_cohort(base, args.rows)
    results["cohort (build and repeat)"] = (time.perf_counter() - start, 0.0, args.rows)
    common = ["--profile", str(RULE), "--cohort", str(cohort), "--no-progress"]
    n = str(args.baseline_rows)
    for label, env in (("batched fsync (a)", {}),
                       ("fsync per record", {"GUARDREPRO_RECORDS_SYNC_ROWS": "1"}),
                       ("batched fsync (b)", {})):
        out = base / label.replace(" ", "-").replace("(", "").replace(")", "")
        seconds, peak = step(["run", *common, "--out", str(out), "--limit", n], env)
        results[f"run --limit {n}, {label}"] = (seconds, peak, args.baseline_rows)
    run = base / "run"
    records = run / "records.jsonl"
    seconds, peak, kept = interrupted(["run", *common, "--out", str(run)], records, after)
    if kept >= args.rows:
        raise SystemExit("the run finished before the interrupt: SIGINT was not delivered")
    results["run, SIGINT after the target"] = (seconds, peak, kept)
    seconds, peak = step(["run", *common, "--out", str(run)])
    results["run again (resume to the end)"] = (seconds, peak, _count(records) - kept)
    seconds, peak = step(["stats", str(run), "--no-progress"])
    results["stats"] = (seconds, peak, _count(records))
    verify_steps(base, args.verify_files, results, args.baseline_tree)
    report(results, args, base, load_before)


def verify_steps(base: Path, files: int, results: dict[str, tuple[float, float, int]],
                 baseline: Path | None = None) -> None:
    """``lock`` of ``files`` small files, then ``verify`` twice (rows: files); with
    ``baseline``, that checkout's ``verify`` before each of this one's, in a cache
    of its own (interleaved: baseline, this, baseline, this)."""
    if files <= 0:
        return
    model = base / f"files-{files}"
    for i in range(files):
        sub = model / f"d{i // 1000:04d}"
        if i % 1000 == 0:
            sub.mkdir(parents=True, exist_ok=True)
        (sub / f"f{i:07d}.bin").write_bytes(b"%d\n" % i)
    lock = base / f"files-{files}.toml"
    results[f"lock of {files} files"] = (*step(["lock", str(model), "--out", str(lock),
                                                "--no-progress", "--force"],
                                               {"GUARDREPRO_HOME": str(base / "home")}), files)
    trees = [("baseline ", baseline.resolve())] if baseline is not None else []
    trees.append(("", ROOT))
    for label in ("verify", "verify again (stamps in place)"):
        for name, tree in trees:
            home = str(base / ("home-baseline" if name else "home"))
            results[name + label] = (*step(["verify", str(lock), "--no-progress"],
                                           {"GUARDREPRO_HOME": home}, tree,
                                           cpu=name + label), files)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def merge_steps(base: Path, rows: int, results: dict[str, tuple[float, float, int]],
                baseline: Path | None) -> None:
    """``rows`` rule rows run as ``--shard 1/2`` and ``--shard 2/2`` (what
    ``run --workers 2`` runs in its workers), then ``merge`` of the two runs
    into a fresh directory: the baseline checkout's first when given, then
    this one's; the merged files must be byte for byte the same."""
    cohort = make_cohort(base, rows)
    common = ["--profile", str(RULE), "--cohort", str(cohort), "--no-progress"]
    shards = []
    for k in (1, 2):
        out = base / f"shard-{k}-of-2"
        seconds, peak = step(["run", *common, "--out", str(out), "--shard", f"{k}/2"])
        results[f"run --shard {k}/2"] = (seconds, peak, _count(out / "records.jsonl"))
        shards.append(str(out))
    trees = [("baseline ", baseline.resolve())] if baseline is not None else []
    trees.append(("", ROOT))
    merged: list[str] = []
    for name, tree in trees:
        out = base / f"merged{'-baseline' if name else ''}"
        seconds, peak = step(["merge", *shards, "--out", str(out), "--cohort", str(cohort)],
                             tree=tree, cpu=name + "merge")
        results[name + "merge"] = (seconds, peak, _count(out / "records.jsonl"))
        merged.append(_sha256(out / "records.jsonl"))  # not the bytes: a forked step's
        # peak RSS starts at this process's (the records held here counted in the next)
    if len(merged) == 2 and merged[0] != merged[1]:
        raise SystemExit("the merged records differ from the baseline's")
    if len(merged) == 2:
        print("merged records.jsonl: byte for byte the baseline's")


def report(results: dict[str, tuple[float, float, int]], args: argparse.Namespace,
           base: Path, load_before: tuple[float, float, float]) -> None:
    what = f"{args.verify_files} files" if args.only_verify else f"{args.rows} rows"
    print(f"{what}, run directories in {base}")
    print(f"load average before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f}"
          f" ({os.cpu_count()} CPUs)")
    print(f"{'step':<46} {'seconds':>9} {'rows':>9} {'rows/s':>8} {'peak MB':>8}")
    for name, (seconds, peak, rows) in results.items():
        rate = rows / seconds if seconds else 0.0
        print(f"{name:<46} {seconds:>9.1f} {rows:>9} {rate:>8.0f} {peak:>8.0f}")
    for name, cpu in CPU.items():
        print(f"CPU seconds, {name}: {cpu:.1f}")
        old = "baseline " + name
        if old in CPU:
            print(f"  {name} / baseline: wall {results[name][0] / results[old][0]:.2f},"
                  f" CPU {cpu / CPU[old]:.2f}")
    if args.only_verify or args.only_merge:
        return
    n = args.baseline_rows
    batched = [v[0] for k, v in results.items() if k.startswith(f"run --limit {n}, batched")]
    per_record = results[f"run --limit {n}, fsync per record"][0]
    print(f"seconds, fsync per record / batched (mean of two): "
          f"{per_record / (sum(batched) / len(batched)):.2f}")
    first = results["run, SIGINT after the target"]
    rest = results["run again (resume to the end)"]
    print(f"seconds per generated row, resume / first run: "
          f"{(rest[0] / max(rest[2], 1)) / (first[0] / max(first[2], 1)):.2f}")


if __name__ == "__main__":
    main()
