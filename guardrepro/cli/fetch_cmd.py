"""``guardrepro fetch LOCK``: download a lock's pinned files into the cache and verify them.

Input: a lock file (TOML, see ``guardrepro.artifacts.locks``) and an optional cache root.
Output (stdout): one line per file (action, path, size, sha256; first-download pins
flagged), then the verified directory. Errors (exit 2) name the file, URL, expected
and observed sha256/size; a download still failing after every retry exits 4.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from guardrepro.artifacts.fetch import fetch_lock
from guardrepro.artifacts.store import FULL_ENV
from guardrepro.cli.options import PROGRESS_OPTION, SpecFile, echo, home_option


@click.command("fetch", short_help="Download and verify the files a lock pins.")
@click.argument("lock", type=SpecFile("locks", exists=True))
@home_option
@PROGRESS_OPTION
@click.option(
    "--verify-full",
    is_flag=True,
    help="Re-hash every cached file instead of the cheap stamp + sampled-block check.",
)
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the lock with its first-download pins recorded to this file"
              " (default: the cache's own pin file; LOCK is never rewritten).")
@click.option("--repair", is_flag=True,
              help="Delete a corrupt blob in the Hugging Face cache and download it again "
              "(otherwise the HF cache is only read: a corrupt blob is named and kept).")
def fetch(lock: Path, home: Path | None, progress: bool, verify_full: bool,
          out: Path | None, repair: bool) -> None:
    """Download the files pinned by LOCK into the content-addressed cache.

    GitHub files come from the LFS media URL or the raw URL at the pinned commit,
    Hugging Face files through huggingface_hub at the pinned revision (HF_ENDPOINT is
    honoured), package files are copied, local directories are verified in place.
    Partial downloads resume; every file is checked against its size and sha256
    before it enters the cache. Pins marked pinned_by = "first-download" are
    recorded after the first verified download, in the cache's pin file (or in
    --out FILE, to commit), and enforced afterwards; LOCK itself is never rewritten.
    LOCK is a path or the name of a shipped lock (`guardrepro fetch toy-guard`).

    A cached file is trusted when its inode, size, mtime and ctime match the stamp
    of its last full hash and its sampled blocks hash as then; anything else is
    re-hashed in full, and a corrupt blob of guardrepro's cache is replaced
    ("repaired") together with every hardlink to it. The Hugging Face cache is the
    user's: a corrupt blob there is named (expected and observed sha256) and kept,
    unless --repair asks to delete it and download it again. --verify-full
    re-hashes everything.

    Prints one line per file and, last, the directory holding the lock's files.
    """
    if verify_full:
        os.environ[FULL_ENV] = "1"
    report = fetch_lock(lock, home, progress=progress, out=out, repair=repair)
    for item in report.files:
        flag = "  [pinned now: first download]" if item.pinned_now else ""
        echo(f"{item.action:<10} {item.path}  {item.size} bytes  sha256={item.sha256}{flag}")
    if report.lock_updated:
        count = len(report.pinned_now)
        echo(f"recorded {count} first-download pin(s) in {report.pins_file}")
    echo(f"{len(report.files)} file(s) verified for lock {report.lock!r}")
    echo(f"directory: {report.directory}")
