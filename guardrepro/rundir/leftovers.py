"""What a run refused before its first record must not leave behind.

Input: a run directory and the files a run may create in it.
Output: ``missing_dirs`` (the directories a ``mkdir(parents=True)`` would make) and
``refused_leaves_nothing``, a context manager that, when its block raises before
any records file grew, removes the files and directories the block created and
cuts append-only files it extended back to their earlier length;
``refused_leaves_no_output``, the same for a whole output directory (a sweep's).

Invariants: a file or directory that existed before the block is never removed;
directories are removed only while empty; nothing is done when a record was added.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path


@contextlib.contextmanager
def refused_leaves_nothing(run_dir: Path, *names: str,
                           records: Sequence[Path]) -> Iterator[None]:
    """Around a run into ``run_dir``: when the block raises before it added a record
    (every file in ``records`` as long as it was), remove the files ``names`` of
    ``run_dir`` that did not exist when the block began, cut those that did
    (append-only files such as ``run.log``) back to their length then, and remove
    the directories the block made (while empty). No other file is touched."""
    new_dirs = missing_dirs(run_dir)
    lengths = {p: _length(p) for p in [run_dir / n for n in names]}
    watched = list(records)
    records_before = [_length(p) or 0 for p in watched]
    try:
        yield
    except BaseException:
        if [_length(p) or 0 for p in watched] == records_before:
            for path, length in lengths.items():
                if length is None:
                    path.unlink(missing_ok=True)
                elif path.is_file() and not path.is_symlink() and path.stat().st_size > length:
                    os.truncate(path, length)
            for directory in new_dirs:  # deepest first
                try:
                    directory.rmdir()
                except OSError:
                    break
        raise


@contextlib.contextmanager
def refused_leaves_no_output(out: Path) -> Iterator[None]:
    """Around a verb that makes the output directory ``out`` (a sweep): when the
    block fails (an exception; not an interruption, which a rerun resumes) and
    ``out`` did not exist before it, remove ``out`` and the parents the block
    made, unless ``out`` now holds work to resume from: a record (a non-empty
    ``records.jsonl``) or a pinned artifact (``*.lock.toml``)."""
    new_dirs = missing_dirs(out)
    try:
        yield
    except Exception:
        if new_dirs and out.is_dir() and not out.is_symlink() and not _holds_work(out):
            shutil.rmtree(out)
            for directory in new_dirs[1:]:  # the parents, deepest first
                try:
                    directory.rmdir()
                except OSError:
                    break
        raise


def _holds_work(out: Path) -> bool:
    records = any(p.stat().st_size > 0 for p in out.rglob("records.jsonl") if p.is_file())
    return records or any(out.rglob("*.lock.toml"))


def _length(path: Path) -> int | None:
    return os.lstat(path).st_size if os.path.lexists(path) else None


def missing_dirs(directory: Path) -> list[Path]:
    """``directory`` and its ancestors that do not exist yet, deepest first."""
    missing = []
    while not os.path.lexists(directory) and directory.parent != directory:
        missing.append(directory)
        directory = directory.parent
    return missing
