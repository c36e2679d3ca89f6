"""``guardrepro verify LOCK``: re-hash everything a lock pins and report file by file.

Input: a lock file and an optional cache root. Output (stdout): one line per file
(ok, mismatch, missing, unpinned, unexpected or unsafe, with expected and observed
sha256/size where they differ), the tree hash line for a local directory, then a
summary. Exit 0 when everything is intact; otherwise exit 2 through
MissingArtifactError (nothing wrong, something absent) or IntegrityError.
"""

from __future__ import annotations

from pathlib import Path

import click

from guardrepro.artifacts.verify import verify_lock

HOME_HELP = "Cache root (default: $GUARDREPRO_HOME, else the user cache dir + guardrepro)."


@click.command("verify", short_help="Re-hash a lock's files; exit 2 on any problem.")
@click.argument("lock", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--home", type=click.Path(file_okay=False, path_type=Path), help=HOME_HELP)
def verify(lock: Path, home: Path | None) -> None:
    """Re-hash every file pinned by LOCK in the cache (or its local directory).

    No cached verification is trusted: every byte is read again. Files the lock
    does not list, symlinks and escaping paths are reported too. Exits 0 when all
    files match their sha256 and size (and the tree hash, for a local directory),
    2 otherwise, naming each bad file with its expected and observed hash.
    """
    report = verify_lock(lock, home)
    for status in report.files:
        click.echo(status.describe())
    if report.tree is not None:
        click.echo(report.tree.describe())
    if report.directory is not None:
        click.echo(f"directory: {report.directory}")
    if report.ok:
        click.echo(f"ok: {len(report.files)} file(s) of lock {report.lock!r} verified")
    report.raise_for_status()
