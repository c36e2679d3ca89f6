"""Re-hash what a lock pins and say, file by file, whether it is intact.

Input: a lock file and the guardrepro home.
Output: a :class:`VerifyReport` (per file: ok, mismatch, missing, unpinned,
unexpected or unsafe; plus the tree hash of a "local" source, computed by
``artifacts.treehash``).

Invariants: ``verify_lock`` ignores verification stamps and reads every byte; files
that hash correctly get a fresh stamp (which ``materialize`` may trust later);
extra files in a lock's directory are reported, never ignored.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardrepro.artifacts import hf_cache
from guardrepro.artifacts.locks import HfSource, LocalSource, Lock, LockedFile, load_lock
from guardrepro.artifacts.paths import artifact_dir, fetch_hint
from guardrepro.artifacts.pins import with_cached_pins
from guardrepro.artifacts.store import (
    guardrepro_home,
    safe_join,
    sha256_file,
    stamp_matches,
    walk_relpaths,
    write_stamp,
)
from guardrepro.artifacts.treehash import TreeHash, cached_tree
from guardrepro.artifacts.verify_fast import FastChecker
from guardrepro.errors import IntegrityError, MissingArtifactError, UnsafePathError
from guardrepro.progress import progress_bar

OK, MISMATCH, MISSING, UNPINNED, UNEXPECTED, UNSAFE = (
    "ok",
    "mismatch",
    "missing",
    "unpinned",
    "unexpected",
    "unsafe",
)
CORRUPT = "corrupt in the HF cache"  # detail prefix: the blob's bytes do not match its name


@dataclass(frozen=True)
class FileStatus:
    """Outcome for one file (``location`` is where it was looked for)."""

    path: str
    status: str
    expected_sha256: str | None = None
    observed_sha256: str | None = None
    expected_size: int | None = None
    observed_size: int | None = None
    location: Path | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == OK

    def describe(self) -> str:
        """One line: status, path, expected and observed hash/size, detail."""
        parts = [f"{self.status:<10} {self.path}"]
        if self.status != OK or self.expected_sha256 is None:
            parts.append(
                f"expected sha256={self.expected_sha256 or '-'} size={_n(self.expected_size)}"
            )
            parts.append(
                f"observed sha256={self.observed_sha256 or '-'} size={_n(self.observed_size)}"
            )
        else:
            parts.append(f"sha256={self.expected_sha256} size={_n(self.expected_size)}")
        if self.detail:
            parts.append(self.detail)
        return "  ".join(parts)


def _n(value: int | None) -> str:
    return "-" if value is None else str(value)


@dataclass(frozen=True)
class TreeStatus:
    """Pinned versus observed tree hash of a "local" directory."""

    expected_sha256: str | None
    expected_files: int | None
    expected_bytes: int | None
    observed: TreeHash | None
    detail: str = ""

    @property
    def ok(self) -> bool:
        got = self.observed
        return (
            got is not None
            and self.expected_sha256 in (None, got.sha256)
            and self.expected_files in (None, got.files)
            and self.expected_bytes in (None, got.bytes)
        )

    def describe(self) -> str:
        got = self.observed
        observed = "-" if got is None else f"{got.sha256} files={got.files} bytes={got.bytes}"
        return (
            f"{'ok' if self.ok else 'mismatch':<10} (tree)  expected {self.expected_sha256}"
            f" files={_n(self.expected_files)} bytes={_n(self.expected_bytes)}  observed {observed}"
            + (f"  {self.detail}" if self.detail else "")
        )


@dataclass(frozen=True)
class VerifyReport:
    """Everything ``verify_lock`` found; ``ok`` only when every check passed."""

    lock: str
    lock_path: Path
    directory: Path | None
    files: tuple[FileStatus, ...]
    tree: TreeStatus | None = None

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.files) and (self.tree is None or self.tree.ok)

    @property
    def problems(self) -> tuple[FileStatus, ...]:
        return tuple(f for f in self.files if not f.ok)

    def raise_for_status(self) -> None:
        """MissingArtifactError if only missing/unpinned files, IntegrityError otherwise."""
        if self.ok:
            return
        bad = self.problems
        lines = [f.describe() for f in bad[:5]]
        if len(bad) > 5:
            lines.append(f"... and {len(bad) - 5} more")
        if self.tree is not None and not self.tree.ok:
            lines.append(self.tree.describe())
        text = f"lock {self.lock!r} ({self.lock_path}) failed verification:\n  " + "\n  ".join(
            lines
        )
        if (
            bad
            and all(f.status in (MISSING, UNPINNED) for f in bad)
            and (self.tree is None or self.tree.ok or self.tree.observed is None)
        ):
            raise MissingArtifactError(text + f"\nrun `guardrepro fetch {self.lock_path}`")
        if any(f.status == UNSAFE for f in bad):
            raise UnsafePathError(text)
        cached = self.directory is not None and "/artifacts/" in self.directory.as_posix()
        if cached and any(f.status == MISMATCH for f in bad):
            text += f"\nrun `guardrepro fetch {self.lock_path}` to replace the corrupt files"
        raise IntegrityError(text)


def check_file(home: Path, path: Path, entry: LockedFile, *, full: bool) -> FileStatus:
    """Status of one pinned file at ``path`` (stamps trusted unless ``full``)."""
    base = FileStatus(entry.path, OK, entry.sha256, None, entry.size, None, path)
    if path.is_symlink():
        return _with(base, UNSAFE, detail="symlink refused")
    if not path.exists():
        detail = "pin not recorded yet (first download)" if entry.pending else ""
        return _with(base, UNPINNED if entry.pending else MISSING, detail=detail)
    if (
        not full
        and not entry.pending
        and entry.sha256 is not None
        and stamp_matches(home, path, entry.sha256, entry.size)
    ):
        return _with(base, OK, observed_sha256=entry.sha256, observed_size=entry.size)
    try:
        sha, size = sha256_file(path)
    except UnsafePathError as exc:
        return _with(base, UNSAFE, detail=str(exc))
    if entry.pending and not entry.matches(sha, size):
        return _with(base, MISMATCH, observed_sha256=sha, observed_size=size,
                     detail="differs from the published value")
    if entry.pending:
        return _with(
            base,
            UNPINNED,
            observed_sha256=sha,
            observed_size=size,
            detail="pin not recorded yet (first download)",
        )
    if sha != entry.sha256 or size != entry.size:
        return _with(base, MISMATCH, observed_sha256=sha, observed_size=size)
    write_stamp(home, path, sha)
    return _with(base, OK, observed_sha256=sha, observed_size=size)


def _with(base: FileStatus, status: str, **changes: Any) -> FileStatus:
    return dataclasses.replace(base, status=status, **changes)


def _extras(directory: Path, lock: Lock) -> list[FileStatus]:
    listed = {entry.path for entry in lock.files}
    try:
        return [
            FileStatus(rel, UNEXPECTED, location=directory / rel,
                       detail="file not listed in the lock")
            for rel in walk_relpaths(directory)
            if rel not in listed
        ]
    except UnsafePathError as exc:
        return [FileStatus(str(directory), UNSAFE, location=directory, detail=str(exc))]


def check_tree(home: Path, lock: Lock, *, full: bool) -> TreeStatus | None:
    """Tree-hash status of a "local" lock that pins tree_sha256/files/bytes (else None)."""
    source = lock.source
    assert isinstance(source, LocalSource)
    if source.tree_sha256 is None and source.tree_files is None and source.tree_bytes is None:
        return None
    directory = lock.local_dir()
    status = TreeStatus(source.tree_sha256, source.tree_files, source.tree_bytes, None)
    try:
        observed = cached_tree(home, directory, full=full)
    except (UnsafePathError, FileNotFoundError) as exc:
        return dataclasses.replace(status, detail=str(exc))
    return dataclasses.replace(status, observed=observed)


def _entries(lock: Lock, progress: bool) -> Iterator[LockedFile]:
    """The lock's files; with ``progress`` a bar on stderr counting their pinned bytes."""
    with _bar(lock, progress) as bar:
        for entry in lock.files:
            yield entry
            bar.update(int(entry.size or 0))


def _bar(lock: Lock, progress: bool) -> Any:
    total = sum(int(entry.size or 0) for entry in lock.files)
    return progress_bar(total, f"verify {lock.name}", "B", enabled=progress, leave=False)


def _check_all_at(home: Path, directory: Path, lock: Lock, *, full: bool,
                  progress: bool) -> list[FileStatus]:
    """``_check_at`` of every entry; with ``full``, through ``verify_fast`` (the
    general path for the entries it leaves)."""
    if not full:
        return [_check_at(home, directory, entry, full=False)
                for entry in _entries(lock, progress)]
    statuses = []
    checker = FastChecker(home, directory)
    try:
        with _bar(lock, progress) as bar:
            for entry, result in checker.check(lock.files,
                                               lambda e: bar.update(int(e.size or 0))):
                if result is None:
                    statuses.append(_check_at(home, directory, entry, full=True))
                    continue
                status, sha, size = result
                location = directory / entry.path
                detail = f"{location} is not a regular file" if status == UNSAFE else ""
                statuses.append(FileStatus(entry.path, status, entry.sha256, sha, entry.size,
                                           size, location, detail))
        checker.flush()
    finally:
        checker.close()
    return statuses


def check_lock(lock: Lock, home: Path, *, full: bool, progress: bool = False) -> VerifyReport:
    """Check every file of a loaded lock; ``full=False`` trusts valid stamps;
    ``progress`` draws a bar on stderr (bytes of the files checked)."""
    assert lock.path is not None
    statuses: list[FileStatus] = []
    tree = None
    if isinstance(lock.source, LocalSource):
        directory: Path | None = lock.local_dir()
        assert directory is not None
        statuses = _check_all_at(home, directory, lock, full=full, progress=progress)
        if directory.is_dir():
            statuses.extend(_extras(directory, lock))
        tree = check_tree(home, lock, full=full)
    elif isinstance(lock.source, HfSource):
        directory = None if lock.pending else artifact_dir(home, lock)
        statuses = [_check_hf(home, lock.source, directory, entry, full=full)
                    for entry in _entries(lock, progress)]
        if directory is not None and directory.is_dir():
            statuses.extend(_extras(directory, lock))
    elif lock.pending:
        directory = None  # no directory until every pin is recorded: check blobs
        for entry in _entries(lock, progress):
            if entry.pending:
                statuses.append(FileStatus(entry.path, UNPINNED, entry.sha256,
                                           expected_size=entry.size,
                                           detail=f"not downloaded yet; {fetch_hint(lock)}"))
            else:
                statuses.append(_check_blob(home, entry, full=full))
    else:
        directory = artifact_dir(home, lock)
        for status, entry in zip(_check_all_at(home, directory, lock, full=full,
                                               progress=progress), lock.files, strict=True):
            if status.ok:
                blob = _check_blob(home, entry, full=False)
                if blob.status == UNSAFE:
                    status = blob
                elif blob.status != MISSING and not _same_inode(blob.location, status.location):
                    # a copy, not a hardlink (or a missing blob): check the blob on its own
                    if full:
                        blob = _check_blob(home, entry, full=True)
                    if not blob.ok:
                        status = blob
            elif status.status == MISSING and _check_blob(home, entry, full=False).ok:
                status = _with(status, MISSING, detail=f"blob present; {fetch_hint(lock)}")
            statuses.append(status)
        if directory.is_dir():
            statuses.extend(_extras(directory, lock))
    return VerifyReport(lock.name, lock.path, directory, tuple(statuses), tree)


def check_hf_entry(home: Path, source: HfSource, entry: LockedFile, *, full: bool) -> FileStatus:
    """Status of one file of an ``hf`` lock in the user's HF cache, checked in place
    (``location``: the blob its snapshot entry points to). A blob whose bytes do not
    match its cache name is a mismatch whose detail starts with ``CORRUPT``."""
    snapshot = hf_cache.snapshot_dir(source)
    base = FileStatus(entry.path, OK, entry.sha256, None, entry.size, None, snapshot / entry.path)
    try:
        target = hf_cache.resolve_entry(snapshot, entry.path)
    except UnsafePathError as exc:
        return _with(base, UNSAFE, detail=str(exc))
    if target is None:
        return _with(base, UNPINNED if entry.pending else MISSING,
                     detail=f"not in the HF cache {snapshot}")
    status = check_file(home, target, entry, full=full)
    observed = status.observed_sha256
    if observed is not None and (full or entry.pending or status.status != OK
                                 or observed != entry.sha256):
        problem = hf_cache.blob_identity_problem(target, observed)
        if problem is not None:
            return _with(status, MISMATCH, detail=f"{CORRUPT}: {target}: {problem}")
    return status


def _check_hf(home: Path, source: HfSource, directory: Path | None, entry: LockedFile,
              *, full: bool) -> FileStatus:
    """An ``hf`` lock's file: its linked copy in the lock's directory when there is
    one, else its bytes in the HF cache (OK there means "linked on first use")."""
    if directory is not None:
        linked = _check_at(home, directory, entry, full=full)
        if linked.status != MISSING:
            return linked
    return check_hf_entry(home, source, entry, full=full)


def _unsafe(entry: LockedFile, location: Path, exc: UnsafePathError) -> FileStatus:
    return FileStatus(entry.path, UNSAFE, entry.sha256, expected_size=entry.size,
                      location=location, detail=str(exc))


def _check_blob(home: Path, entry: LockedFile, *, full: bool) -> FileStatus:
    """Status of the blob an entry pins (a symlinked blob or blob dir is "unsafe")."""
    assert entry.sha256 is not None
    try:
        blobs = safe_join(home, "blobs/sha256")
    except UnsafePathError as exc:
        return _unsafe(entry, home / "blobs/sha256", exc)
    status = check_file(home, blobs / entry.sha256, entry, full=full)
    if status.status == UNSAFE:
        return _with(status, UNSAFE, detail=f"cached blob {blobs / entry.sha256}: {status.detail}")
    return status


def _check_at(home: Path, directory: Path, entry: LockedFile, *, full: bool) -> FileStatus:
    try:
        path = safe_join(directory, entry.path)
    except UnsafePathError as exc:
        return _unsafe(entry, directory, exc)
    return check_file(home, path, entry, full=full)


def _same_inode(a: Path | None, b: Path | None) -> bool:
    if a is None or b is None:
        return False
    try:
        sa, sb = os.stat(a, follow_symlinks=False), os.stat(b, follow_symlinks=False)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def verify_lock(
    lock_path: str | os.PathLike[str], home: str | os.PathLike[str] | None = None,
    *, progress: bool = False,
) -> VerifyReport:
    """Re-hash every file the lock pins (no stamps trusted); never raises on a bad
    file. ``progress``: a bar on stderr."""
    home_dir = guardrepro_home(home)
    return check_lock(with_cached_pins(load_lock(lock_path), home_dir), home_dir, full=True,
                      progress=progress)
