"""``guardrepro verify LOCK``: re-hash everything a lock pins and report file by file.

Input: a lock file and an optional cache root. Output (stdout): one line per file
(ok, mismatch, missing, unpinned, unexpected or unsafe, with expected and observed
sha256/size where they differ), the tree hash line for a local directory, then a
summary; for files not in the cache yet (a lock never fetched here), what
``guardrepro fetch`` will do with each (where from, checked against which
published or recorded hash, or pinned at this first download); with ``--json``
the whole report as JSON on stdout, the plan under ``"fetch_plan"`` (the lines
on stderr). Exit 0 when everything is intact; otherwise exit 2 through
MissingArtifactError (nothing wrong, something absent) or IntegrityError.
``--progress`` (the default) draws a bar of the bytes re-hashed on stderr.
"""

from __future__ import annotations

from pathlib import Path

import click

from guardrepro.artifacts.locks import load_lock
from guardrepro.artifacts.pins import with_cached_pins
from guardrepro.artifacts.plan import fetch_plan
from guardrepro.artifacts.store import guardrepro_home
from guardrepro.artifacts.verify import MISSING, UNPINNED, check_lock
from guardrepro.cli.options import (
    JSON_OPTION,
    PROGRESS_OPTION,
    SpecFile,
    emit,
    home_option,
    to_jsonable,
)
from guardrepro.errors import MissingArtifactError


@click.command("verify", short_help="Re-hash a lock's files; exit 2 on any problem.")
@click.argument("lock", type=SpecFile("locks", exists=True))
@home_option
@PROGRESS_OPTION
@JSON_OPTION
def verify(lock: Path, home: Path | None, progress: bool, as_json: bool) -> None:
    """Re-hash every file pinned by LOCK in the cache (or its local directory).

    No cached verification is trusted: every byte is read again. Files the lock
    does not list, symlinks and escaping paths are reported too. Exits 0 when all
    files match their sha256 and size (and the tree hash, for a local directory),
    2 otherwise, naming each bad file with its expected and observed hash.
    """
    cache = guardrepro_home(home)
    pinned = with_cached_pins(load_lock(lock), cache)  # first-download pins of this cache
    report = check_lock(pinned, cache, full=True, progress=progress)
    plan = fetch_plan(pinned, report, cache)
    lines = [status.describe() for status in report.files]
    if report.tree is not None:
        lines.append(report.tree.describe())
    if report.directory is not None:
        lines.append(f"directory: {report.directory}")
    if plan:
        lines.append(f"{len(plan)} of {len(report.files)} file(s) not in the cache {cache};"
                     f" `guardrepro fetch {lock}` will:")
        lines.extend(f"  {planned.action}" for planned in plan)
    if report.ok:
        lines.append(f"ok: {len(report.files)} file(s) of lock {report.lock!r} verified")
    # the JSON document only when asked for (a line per file costs ~0.7 ms to build)
    document = ({**to_jsonable(report), "ok": report.ok, "fetch_plan": to_jsonable(plan)}
                if as_json else None)
    emit(as_json, document, "\n".join(lines))
    if plan and all(f.status in (MISSING, UNPINNED) for f in report.problems) and (
            report.tree is None or report.tree.ok):
        raise MissingArtifactError(
            f"lock {report.lock!r}: {len(plan)} of {len(report.files)} file(s) not in the cache"
            f" {cache}; run `guardrepro fetch {lock}` (what it will do is listed above)")
    report.raise_for_status()
