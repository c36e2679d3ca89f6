"""``guardrepro verify LOCK``: re-hash everything a lock pins and report file by file.

Input: a lock file and an optional cache root. Output (stdout): one line per file
(ok, mismatch, missing, unpinned, unexpected or unsafe, with expected and observed
sha256/size where they differ), the tree hash line for a local directory, then a
summary; with ``--json`` the whole report as JSON on stdout (the lines on
stderr). Exit 0 when everything is intact; otherwise exit 2 through
MissingArtifactError (nothing wrong, something absent) or IntegrityError.
``--progress`` (the default) draws a bar of the bytes re-hashed on stderr.
"""

from __future__ import annotations

from pathlib import Path

import click

from guardrepro.artifacts.verify import verify_lock
from guardrepro.cli.options import (
    JSON_OPTION,
    PROGRESS_OPTION,
    SpecFile,
    emit,
    home_option,
    to_jsonable,
)


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
    report = verify_lock(lock, home, progress=progress)
    lines = [status.describe() for status in report.files]
    if report.tree is not None:
        lines.append(report.tree.describe())
    if report.directory is not None:
        lines.append(f"directory: {report.directory}")
    if report.ok:
        lines.append(f"ok: {len(report.files)} file(s) of lock {report.lock!r} verified")
    emit(as_json, {**to_jsonable(report), "ok": report.ok}, "\n".join(lines))
    report.raise_for_status()
