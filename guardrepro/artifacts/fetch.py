"""Fetch what a lock pins into the cache and hand out verified directories.

Input: a lock file path and the guardrepro home (see ``guardrepro.artifacts.store``).
Output: ``fetch_lock`` -> :class:`FetchReport` (files now in the cache, the lock's
materialized directory); ``materialize`` -> that directory, checked, without network.

Per source: "github" files come over HTTP from the LFS media URL or the raw URL at the
pinned commit (base URLs overridable by ``GUARDREPRO_GITHUB_MEDIA_URL`` /
``GUARDREPRO_GITHUB_RAW_URL``) into the blob store; "hf" files live in the user's
Hugging Face cache (``guardrepro.artifacts.hf_cache``): ``snapshot_download`` at the
pinned revision fetches what is missing (``HF_ENDPOINT``, ``HF_HOME``,
``HF_HUB_CACHE`` and ``HF_HUB_OFFLINE`` honoured), every file is verified in place
there, and the lock's directory holds hardlinks to those blobs (a copy, with a
warning, only across filesystems); "package" files are copied from inside the
guardrepro package; "local" directories are verified in place and never copied.

Invariants: a file enters the blob store only after its bytes hashed to the pin (or,
for a first-download pin, to the hub's LFS sha256 when there is one); a pending pin is
recorded (``pinned_by = "first-download"``, ``pinned_at`` = today) in the cache's pin
file (``guardrepro.artifacts.pins``; or ``out``), never in the lock file itself, only
after every file of the lock verified, and later fetches refuse any other bytes;
the materialized directory holds exactly the lock's files as hardlinks (or copies) of
blobs, is rebuilt in a temp dir and swapped in, and never contains a symlink; a
corrupt blob found in the cache (cheap stamp check: inode, size, mtime, ctime and
sampled blocks; else a full hash) is deleted with every hardlink to it under
``artifacts/`` and fetched again ("repaired"). One fetch per lock name and home at a
time (inter-process file lock); first-download pins are recorded under an flock of
the pin file's directory after re-reading the pins, so two concurrent first downloads
into one cache cannot both pin: the second refuses bytes that differ.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import fcntl
import hashlib
import os
import shutil
import sys
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from guardrepro.artifacts import hf_cache
from guardrepro.artifacts import http as fetch_http
from guardrepro.artifacts import hub as fetch_hub
from guardrepro.artifacts.locks import (
    GithubSource,
    HfSource,
    LocalSource,
    Lock,
    LockedFile,
    PackageSource,
    load_lock,
    save_lock,
)
from guardrepro.artifacts.paths import artifact_dir, fetch_hint, package_file
from guardrepro.artifacts.pins import merge_pins, pin_file, with_cached_pins
from guardrepro.artifacts.store import (
    add_blob,
    blob_path,
    ensure_dir,
    guardrepro_home,
    link_or_copy,
    safe_join,
    sha256_file,
    stamp_matches,
    write_stamp,
)
from guardrepro.artifacts.template import extract_template
from guardrepro.artifacts.verify import VerifyReport, check_lock
from guardrepro.errors import (
    IntegrityError,
    LockError,
    MissingArtifactError,
    PromptError,
    UnsafePathError,
)

MEDIA_ENV = "GUARDREPRO_GITHUB_MEDIA_URL"
RAW_ENV = "GUARDREPRO_GITHUB_RAW_URL"
MEDIA_URL = "https://media.githubusercontent.com/media"
RAW_URL = "https://raw.githubusercontent.com"


@dataclass(frozen=True)
class FetchedFile:
    """One file after fetch. action: downloaded, cached, copied (package) or in-place (local)."""

    path: str
    sha256: str
    size: int
    action: str
    pinned_now: bool = False


@dataclass(frozen=True)
class FetchReport:
    """What ``fetch_lock`` did; ``directory`` is the lock's verified directory."""

    lock: str
    lock_path: Path
    directory: Path
    files: tuple[FetchedFile, ...]
    lock_updated: bool  # pins recorded: in ``pins_file`` (the lock file is never rewritten)
    pins_file: Path | None = None

    @property
    def pinned_now(self) -> tuple[str, ...]:
        return tuple(f.path for f in self.files if f.pinned_now)


def github_url(source: GithubSource, entry: LockedFile) -> str:
    """Download URL of a github-source file at the pinned commit."""
    if entry.lfs:
        base = os.environ.get(MEDIA_ENV) or MEDIA_URL
    else:
        base = os.environ.get(RAW_ENV) or RAW_URL
    quoted = urllib.parse.quote(entry.path, safe="/")
    return f"{base.rstrip('/')}/{source.repo}/{source.commit}/{quoted}"


def _state_lock(home: Path, lock: Lock) -> FileLock:
    ensure_dir(home, "state/locks")
    return FileLock(str(safe_join(home, f"state/locks/{lock.name}.lock")))


def _blob_state(home: Path, entry: LockedFile, lock: Lock | None = None) -> str:
    """ "ok" if the pinned blob is present and intact (cheap stamp check, else a full
    hash), "absent", or "corrupt" -- a corrupt blob is deleted together with every
    hardlink to it under ``artifacts/`` so no directory keeps serving its bytes.

    A blob is owned by its sha256, not by one lock: when its bytes hash to the pinned
    sha256 but the lock states another size, the lock is wrong (LockError naming the
    lock and file) and the blob, which other locks may share, is left alone."""
    assert entry.sha256 is not None
    blob = blob_path(home, entry.sha256)
    if not blob.exists() and not blob.is_symlink():
        return "absent"
    if stamp_matches(home, blob, entry.sha256, entry.size):
        return "ok"
    sha, size = sha256_file(blob)
    if sha == entry.sha256 and size == entry.size:
        write_stamp(home, blob, sha)
        return "ok"
    if sha == entry.sha256:
        write_stamp(home, blob, sha)
        where = f"lock {lock.name!r}" if lock is not None else "the lock"
        raise LockError(
            f"{where}: {entry.path}: size = {entry.size} contradicts sha256 {sha}, whose"
            f" cached bytes were just verified at {size} bytes; fix the size in the lock"
            " (the cached blob is shared content and was kept)",
            file=str(lock.path) if lock is not None and lock.path is not None else None,
        )
    _purge_links(home, blob)
    blob.unlink()  # corrupt cache entry: fetch again
    return "corrupt"


def _purge_links(home: Path, blob: Path) -> None:
    """Delete every file under ``artifacts/`` that is the same inode as ``blob``."""
    st = os.stat(blob, follow_symlinks=False)
    if st.st_nlink <= 1:
        return
    root = safe_join(home, "artifacts")
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            with contextlib.suppress(OSError):
                other = os.stat(path, follow_symlinks=False)
                if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
                    path.unlink()


def _check_extract(path: Path, entry: LockedFile) -> None:
    """Before pinning a file by first download, check its pinned extracted string.

    Delegates to ``guardrepro.artifacts.template.extract_template`` (``ast`` only, never
    imports the module) so fetch and prompt loading agree on what is extracted.
    """

    assert entry.extract is not None and entry.extract_sha256 is not None
    try:
        extract_template(path, entry.extract, entry.extract_sha256)
    except PromptError as exc:
        raise IntegrityError(f"{entry.path}: {entry.extract}: {exc}") from None


def _obtain_github(home: Path, lock: Lock, entry: LockedFile, progress: bool) -> tuple[str, int]:
    assert isinstance(lock.source, GithubSource)
    url = github_url(lock.source, entry)
    name = (
        hashlib.sha256(entry.path.encode()).hexdigest()[:16] + "-" + entry.path.rsplit("/", 1)[-1]
    )
    dest = safe_join(ensure_dir(home, f"downloads/{lock.name}"), name)
    sha, size = fetch_http.download(
        url,
        dest,
        expected_sha256=entry.sha256,
        expected_size=entry.size,
        label=entry.path,
        progress=progress,
    )
    if entry.extract is not None and entry.pending:
        try:
            _check_extract(dest, entry)
        except IntegrityError as exc:
            dest.unlink()
            raise IntegrityError(f"{exc} ({url})") from None
    add_blob(home, dest, sha, move=True)
    return sha, size


def _obtain_package(home: Path, lock: Lock, entry: LockedFile) -> tuple[str, int]:
    source = package_file(lock, entry)
    if not source.exists():
        raise MissingArtifactError(f"{entry.path}: not in the guardrepro package ({source})")
    sha, size = sha256_file(source)
    if not entry.matches(sha, size):
        raise IntegrityError(
            f"{entry.path} ({source}): expected sha256 {entry.sha256} size {entry.size},"
            f" observed sha256 {sha} size {size}"
        )
    if entry.extract is not None and entry.pending:
        _check_extract(source, entry)
    add_blob(home, source, sha, move=False)
    return sha, size


def _fetch_hub(home: Path, lock: Lock, progress: bool, repair: bool) -> list[FetchedFile]:
    """An ``hf`` lock's files verified in place in the user's HF cache (no copy);
    ``repair``: a corrupt blob there may be deleted and downloaded again."""
    files = []
    for got in fetch_hub.fetch_to_cache(home, lock, progress=progress, repair=repair):
        entry = lock.file(got.path)
        if entry.extract is not None and entry.pending:
            _check_extract(got.location, entry)
        files.append(FetchedFile(got.path, got.sha256, got.size, got.action, entry.pending))
    return files


def _unlinked(report: VerifyReport) -> bool:
    """True when some file verified outside the lock's directory (in the HF cache)."""
    directory = report.directory
    return directory is not None and any(
        f.location is None or directory not in f.location.parents for f in report.files
    )


def _build_directory(home: Path, lock: Lock) -> Path:
    """(Re)build the lock's materialized directory from blobs; return it."""
    target = artifact_dir(home, lock)
    parent = ensure_dir(home, f"artifacts/{lock.name}")
    sources = hf_cache.lock_sources(lock) if isinstance(lock.source, HfSource) else {}
    # linking and unlinking move a blob's ctime; blobs trusted now are re-stamped
    # afterwards, so a rebuild does not cost a full re-hash of every checkpoint file
    trusted = [
        entry
        for entry in lock.files
        if entry.sha256 is not None
        and stamp_matches(home, _source_of(home, entry, sources), entry.sha256, entry.size)
    ]
    copied = []
    tmp = safe_join(parent, f".tmp-{target.name}-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        for entry in lock.files:
            blob = _source_of(home, entry, sources)
            if blob.is_symlink():
                raise UnsafePathError(f"{blob} is a symlink (refused in the cache)")
            if not blob.exists():
                raise MissingArtifactError(
                    f"lock {lock.name!r}: {entry.path} (sha256 {entry.sha256}) is not in the"
                    f" cache {home}; {fetch_hint(lock)}"
                )
            dest = safe_join(tmp, entry.path)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if link_or_copy(blob, dest) == "copy" and sources:
                copied.append(entry.path)
        old = safe_join(parent, f".old-{target.name}-{os.getpid()}")
        if target.exists():
            os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    for entry in trusted:
        assert entry.sha256 is not None
        with contextlib.suppress(OSError):
            write_stamp(home, _source_of(home, entry, sources), entry.sha256)
    if copied:
        print(f"warning: {len(copied)} file(s) of lock {lock.name!r} were copied, not"
              f" hardlinked, from the HF cache into {target} (another filesystem); set"
              f" GUARDREPRO_HOME on the filesystem of the HF cache to avoid the copy",
              file=sys.stderr)
    return target


def _source_of(home: Path, entry: LockedFile, sources: dict[str, Path]) -> Path:
    """The file a lock entry's directory entry is linked from."""
    if entry.path in sources:
        return sources[entry.path]
    assert entry.sha256 is not None
    return blob_path(home, entry.sha256)


def _checked_directory(home: Path, lock: Lock) -> Path:
    """The lock's directory after a stamp-trusting check; rebuilt from blobs if needed."""
    for attempt in range(2):
        report = check_lock(lock, home, full=False)
        if report.ok and _unlinked(report):
            with _state_lock(home, lock):
                return _build_directory(home, lock)
        if report.ok:
            assert report.directory is not None
            return report.directory
        repairable = not isinstance(lock.source, LocalSource) and all(
            f.status in ("missing", "unexpected") for f in report.problems
        )
        if attempt == 0 and repairable:
            with _state_lock(home, lock):
                _build_directory(home, lock)
            continue
        report.raise_for_status()
    raise AssertionError("unreachable")


def materialize(
    lock_path: str | os.PathLike[str], home: str | os.PathLike[str] | None = None
) -> Path:
    """Verified local directory holding every file of the lock at its relative path.

    No network: files come from the cache (re-linked from blobs if the directory is
    missing or incomplete). MissingArtifactError (naming the file and the fetch
    command) when something was never fetched; IntegrityError on wrong bytes. Files
    whose inode, size and mtime match an earlier full hash are not re-hashed; run
    ``verify_lock`` for a full re-hash.
    """
    return materialize_lock(load_lock(lock_path), home)


def materialize_lock(lock: Lock, home: str | os.PathLike[str] | None = None) -> Path:
    """``materialize`` for a lock already read (``lock.path`` set by ``load_lock``)."""
    home_dir = guardrepro_home(home)
    return _checked_directory(home_dir, with_cached_pins(lock, home_dir))


def _fetch_local(home: Path, lock: Lock) -> list[FetchedFile]:
    """Verify a local directory in place; observed hashes of pending entries included."""
    report = check_lock(lock, home, full=False)
    bad = [f for f in report.problems if f.status != "unpinned" or f.observed_sha256 is None]
    if bad or (report.tree is not None and not report.tree.ok):
        report.raise_for_status()
    files = []
    by_path = {f.path: f for f in report.files}
    for entry in lock.files:
        status = by_path[entry.path]
        sha, size = status.observed_sha256, status.observed_size
        assert sha is not None and size is not None
        if entry.extract is not None and entry.pending:
            assert status.location is not None
            _check_extract(status.location, entry)
        files.append(FetchedFile(entry.path, sha, size, "in-place", entry.pending))
    return files


@contextlib.contextmanager
def _lock_file_lock(path: Path) -> Iterator[None]:
    """Exclusive flock on the directory holding a lock file, across processes and
    cache homes (the file itself is replaced on save, so it cannot carry the lock)."""
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _record_pins(
    home: Path, lock: Lock, files: list[FetchedFile], out: Path | None
) -> tuple[Lock, list[FetchedFile], Path | None]:
    """Record first-download pins in the cache's pin file (``pins.pin_file``), or in
    ``out``; the lock file itself is never rewritten. The pins are re-read under a
    lock of their folder, and bytes that differ from a pin another fetch recorded
    meanwhile are refused. Returns the pinned lock, the files and where pins went."""
    if not lock.pending and out is None:
        return lock, files, None
    assert lock.path is not None
    target = out if out is not None else pin_file(home, lock)
    if out is None:
        ensure_dir(home, "pins")
    today = dt.datetime.now(dt.UTC).date()
    with _lock_file_lock(target):
        current = merge_pins(with_cached_pins(load_lock(lock.path), home), target)
        if [e.path for e in current.files] != [e.path for e in lock.files]:
            raise LockError("the lock's file list changed during the fetch", file=str(lock.path))
        entries, got_files = [], []
        for entry, got in zip(current.files, files, strict=True):
            if entry.pending:
                entries.append(entry.recorded(got.sha256, got.size, today))
                got_files.append(got)
                continue
            if (entry.sha256, entry.size) != (got.sha256, got.size):
                raise IntegrityError(
                    f"{lock.path}: {entry.path}: pinned meanwhile (by another fetch) to sha256"
                    f" {entry.sha256} size {entry.size}; the bytes downloaded here differ"
                    f" (sha256 {got.sha256} size {got.size}) and are refused"
                )
            entries.append(entry)
            got_files.append(dataclasses.replace(got, pinned_now=False))
        new = current.with_files(tuple(entries))
        written = out is not None or new != current
        if written:
            save_lock(new, target)
    return new, got_files, target if written else None


def fetch_lock(
    lock_path: str | os.PathLike[str],
    home: str | os.PathLike[str] | None = None,
    *,
    progress: bool = True,
    out: str | os.PathLike[str] | None = None,
    repair: bool = False,
) -> FetchReport:
    """Bring every file of the lock into the cache, verified; record first-download pins.

    First-download pins go to the cache's pin file (``pins.pin_file``), or with
    ``out`` to that file (the whole lock, pinned); ``lock_path`` is never rewritten.
    ``repair``: a corrupt blob in the user's HF cache is deleted and downloaded
    again (without it, it is named and kept).
    Returns the per-file outcome and the materialized directory. Raises FetchError
    (network/HTTP/hub trouble), IntegrityError (wrong bytes or size, naming file, URL,
    expected and observed), UnsafePathError (symlinks, escaping paths).
    """
    home_dir = guardrepro_home(home)
    lock = with_cached_pins(load_lock(lock_path), home_dir)
    ensure_dir(home_dir, "blobs/sha256")
    with _state_lock(home_dir, lock):
        if isinstance(lock.source, LocalSource):
            files = _fetch_local(home_dir, lock)
        elif isinstance(lock.source, HfSource):
            files = _fetch_hub(home_dir, lock, progress, repair)
        else:
            files = _fetch_into_cache(home_dir, lock, progress)
        target = None if out is None else Path(out)
        lock, files, pins = _record_pins(home_dir, lock, files, target)
        if isinstance(lock.source, HfSource) or (
            not isinstance(lock.source, LocalSource)
            and not check_lock(lock, home_dir, full=False).ok
        ):
            _build_directory(home_dir, lock)
    directory = _checked_directory(home_dir, lock)
    assert lock.path is not None
    return FetchReport(lock.name, lock.path, directory, tuple(files), pins is not None, pins)


def _fetch_into_cache(home: Path, lock: Lock, progress: bool) -> list[FetchedFile]:
    results: dict[str, FetchedFile] = {}
    todo = []
    corrupt = set()
    for entry in lock.files:
        state = "absent" if entry.pending else _blob_state(home, entry, lock)
        if state == "ok":
            assert entry.sha256 is not None and entry.size is not None
            results[entry.path] = FetchedFile(entry.path, entry.sha256, entry.size, "cached")
        else:
            if state == "corrupt":
                corrupt.add(entry.path)
            todo.append(entry)
    for entry in todo:
        if isinstance(lock.source, GithubSource):
            sha, size = _obtain_github(home, lock, entry, progress)
            action = "downloaded"
        else:
            assert isinstance(lock.source, PackageSource)
            sha, size = _obtain_package(home, lock, entry)
            action = "copied"
        results[entry.path] = FetchedFile(entry.path, sha, size, action, entry.pending)
    for entry in lock.files:
        with contextlib.suppress(OSError):
            write_stamp(
                home, blob_path(home, results[entry.path].sha256), results[entry.path].sha256
            )
    return [
        dataclasses.replace(results[path], action="repaired") if path in corrupt else results[path]
        for path in (entry.path for entry in lock.files)
    ]
