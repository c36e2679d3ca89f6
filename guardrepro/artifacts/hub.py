"""Hugging Face Hub download of pinned checkpoint files through huggingface_hub.

Input: an ``hf`` lock source (repo + 40-hex revision) and the file entries to get.
Output: what the hub claims for each file (``resolve``), and the files themselves in
the user's Hugging Face cache (``download``, one bounded ``hf_hub_download`` per file,
``guardrepro.artifacts.hub_download``), where ``guardrepro.artifacts.fetch`` verifies
them in place.

Invariants: ``HF_ENDPOINT`` is read at call time and passed explicitly, so it need not
be set before huggingface_hub is imported; every listed file is resolved (HEAD) before
any byte is downloaded, so a file the hub lacks fails the fetch up front; the hub must
report the pinned revision as the commit it served; for an LFS file the hub's sha256
(its ETag) must equal the hash of the local bytes and any pin in the lock; sizes must
agree with the hub and the lock; a corrupt cached blob is named and kept unless the
caller asks for a repair; no download writes more than the lock's size (or
the hub's attested size for a first-download pin): more is TransientFetchError and
nothing of it is kept. Downloads go to the HF cache that
``guardrepro.artifacts.hf_cache.hub_cache_dir`` names (``HF_HUB_CACHE`` / ``HF_HOME``
read at call time), never to a second copy.
A cached file whose bytes hash to the lock's sha256 but whose size is not the
lock's raises LockError naming the lock and file; that blob is kept (it is the
hub's content, which other locks may share).
Network and server trouble that huggingface_hub did not overcome raises
TransientFetchError (exit 4); a full or read-only local disk raises OutputError.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardrepro.artifacts import hf_cache, hub_download
from guardrepro.artifacts.locks import HfSource, Lock, LockedFile
from guardrepro.artifacts.verify import (
    CORRUPT,
    MISMATCH,
    UNPINNED,
    UNSAFE,
    FileStatus,
    check_hf_entry,
)
from guardrepro.errors import (
    FetchError,
    IntegrityError,
    LockError,
    MissingArtifactError,
    TransientFetchError,
    UnsafePathError,
)
from guardrepro.spec import HEX64


@dataclass(frozen=True)
class HubFile:
    """What the hub says about one file at the pinned revision."""

    path: str
    commit: str
    etag: str
    size: int | None
    lfs_sha256: str | None  # the ETag when it is a sha256 (an LFS file), else None


def _endpoint() -> str | None:
    value = os.environ.get("HF_ENDPOINT")
    return value.rstrip("/") if value else None


def _where(source: HfSource, path: str) -> str:
    return f"{path} in hf://{source.repo}@{source.revision}"


def _hub() -> Any:
    import huggingface_hub

    from guardrepro.logs import adopt_libraries

    adopt_libraries()  # its retry warnings once, through our handler
    return huggingface_hub


def resolve(source: HfSource, entry: LockedFile) -> HubFile:
    """HEAD the file at the pinned revision; FetchError if the hub lacks it."""
    hub = _hub()
    from huggingface_hub import errors as hub_errors

    endpoint = _endpoint()
    where = _where(source, entry.path)
    url = hub.hf_hub_url(
        source.repo,
        entry.path,
        repo_type=source.repo_type,
        revision=source.revision,
        endpoint=endpoint,
    )
    try:
        meta = hub.get_hf_file_metadata(url, endpoint=endpoint, retry_on_errors=True)
    except hub_errors.RemoteEntryNotFoundError:
        raise FetchError(
            f"{where}: the hub has no such file at the pinned revision ({url}); the lock's"
            " file list must be corrected"
        ) from None
    except hub_errors.RevisionNotFoundError:
        raise FetchError(f"{where}: the hub has no revision {source.revision} ({url})") from None
    except hub_errors.RepositoryNotFoundError:
        raise FetchError(f"{where}: repository not found or not accessible ({url})") from None
    except Exception as exc:  # httpx2/hub errors: network, 5xx, bad endpoint
        raise TransientFetchError(
            f"{where}: cannot resolve {url}: {type(exc).__name__}: {exc}"
        ) from None
    if meta.commit_hash != source.revision:
        raise IntegrityError(
            f"{where}: the hub served commit {meta.commit_hash!r}, not the pinned revision"
        )
    if not meta.etag:
        raise FetchError(f"{where}: the hub sent no ETag ({url})")
    lfs = meta.etag if HEX64.fullmatch(meta.etag) else None
    hub_file = HubFile(entry.path, meta.commit_hash, meta.etag, meta.size, lfs)
    if entry.sha256 is not None and lfs is not None and lfs != entry.sha256:
        raise IntegrityError(
            f"{where}: hub LFS sha256 {lfs} differs from the lock's sha256 {entry.sha256}"
        )
    if entry.size is not None and meta.size is not None and meta.size != entry.size:
        raise IntegrityError(
            f"{where}: hub size {meta.size} differs from the lock's size {entry.size}"
            f" (lock sha256 {entry.sha256 or 'not recorded'}, hub ETag {meta.etag})"
        )
    return hub_file


def download(source: HfSource, entries: list[LockedFile], resolved: list[HubFile], *,
             progress: bool) -> None:
    """Download the entries at the pinned revision into the user's HF cache, each at
    most its lock size (or, for a first-download pin, the size the hub attested on
    HEAD); ``guardrepro.artifacts.hub_download`` enforces the bound. The cache root is
    read from the environment now, not when huggingface_hub was imported."""
    jobs = []
    for entry, hub_file in zip(entries, resolved, strict=True):
        limit = hub_download.byte_limit(source, entry, hub_file.size)
        jobs.append((entry, hub_file.etag, limit))
    hub_download.download_files(source, jobs, progress=progress)


@dataclass(frozen=True)
class CachedFile:
    """A lock entry verified in place in the HF cache; ``location`` holds its bytes."""

    path: str
    sha256: str
    size: int
    action: str  # "cached", "downloaded" or "repaired"
    location: Path


def _usable(status: FileStatus) -> bool:
    """Verified bytes: pinned and matching, or a pending pin with observed bytes."""
    return status.ok or (status.status == UNPINNED and status.observed_sha256 is not None)


def _discard(status: FileStatus, snapshot: Path) -> None:
    """Remove a corrupt blob and its snapshot entry so huggingface_hub fetches it again."""
    link = snapshot / status.path
    for path in (status.location, link):
        if path is not None and (path.is_symlink() or path.exists()):
            path.unlink()


def fetch_to_cache(home: Path, lock: Lock, *, progress: bool,
                   repair: bool = False) -> list[CachedFile]:
    """Every file of an ``hf`` lock, verified in place in the user's HF cache.

    Files already there and intact are not asked of the hub (no network at all when
    the snapshot is complete, offline mode or not). The others are resolved (HEAD)
    first, all of them, then downloaded (``download``). The HF cache is the user's:
    a cached blob whose bytes fail their sha256 is an IntegrityError naming it as
    corrupt (expected and observed sha256), and is kept; only with ``repair`` (and
    not offline, where it could not be downloaded again) is it removed and fetched
    again ("repaired"). With ``HF_HUB_OFFLINE`` set, a missing file is a
    MissingArtifactError naming it.
    """
    source = lock.source
    assert isinstance(source, HfSource)
    snapshot = hf_cache.snapshot_dir(source)
    states = {e.path: check_hf_entry(home, source, e, full=False) for e in lock.files}
    todo, corrupt = [], []
    for entry in lock.files:
        status = states[entry.path]
        if _usable(status):
            continue
        if status.status == UNSAFE:
            raise UnsafePathError(status.describe())
        if status.status == MISMATCH:
            _refuse_wrong_size(lock, entry, status)
            if not status.detail.startswith(CORRUPT):  # intact hub bytes, other pin
                raise IntegrityError(
                    f"{_where(source, entry.path)}: the HF cache holds the hub's bytes of this"
                    f" revision and they differ from the lock: {status.describe()}"
                )
            corrupt.append(status)
        todo.append(entry)
    _refuse_corrupt(lock, corrupt, repair)
    if todo and hf_cache.offline():
        names = ", ".join(entry.path for entry in todo[:5])
        raise MissingArtifactError(
            f"lock {lock.name!r}: HF_HUB_OFFLINE is set and the HF cache {snapshot} lacks"
            f" {len(todo)} file(s) ({names}); unset HF_HUB_OFFLINE to download them"
        )
    for status in corrupt:
        _discard(status, snapshot)
    repaired = {status.path for status in corrupt}
    if todo:
        resolved = [resolve(source, entry) for entry in todo]  # all before any GET
        download(source, todo, resolved, progress=progress)
        for entry, hub_file in zip(todo, resolved, strict=True):
            states[entry.path] = _checked_download(home, source, entry, hub_file, snapshot)
    out = []
    for entry in lock.files:
        status = states[entry.path]
        assert status.observed_sha256 is not None and status.observed_size is not None
        assert status.location is not None
        action = "repaired" if entry.path in repaired else (
            "downloaded" if entry in todo else "cached")
        out.append(CachedFile(entry.path, status.observed_sha256, status.observed_size,
                              action, status.location))
    return out


def _refuse_corrupt(lock: Lock, corrupt: list[FileStatus], repair: bool) -> None:
    """Name every corrupt blob and keep it, unless a repair was asked for and the
    blob can be downloaded again (not offline)."""
    if not corrupt or (repair and not hf_cache.offline()):
        return
    found = "; ".join(f"{status.path}: {status.detail}"
                      + (f" (the lock pins sha256 {status.expected_sha256})"
                         if status.expected_sha256 else "") for status in corrupt)
    if repair:
        advice = "HF_HUB_OFFLINE is set, so nothing was deleted: unset it to repair"
    else:
        advice = (f"the HF cache was left as it is; `guardrepro fetch {lock.path or lock.name}"
                  " --repair` deletes the corrupt blob and downloads it again")
    raise IntegrityError(f"lock {lock.name!r}: {found}; {advice}")


def _refuse_wrong_size(lock: Lock, entry: LockedFile, status: FileStatus) -> None:
    """A cached blob that hashes to the pinned sha256 but has another size than the
    lock states: the lock is wrong (LockError naming it); the blob, shared content of
    the HF cache, is kept."""
    if (entry.sha256 is not None and status.observed_sha256 == entry.sha256
            and entry.size is not None and status.observed_size != entry.size
            and not status.detail.startswith(CORRUPT)):
        raise LockError(
            f"lock {lock.name!r}: {entry.path}: size = {entry.size} contradicts sha256"
            f" {entry.sha256}, whose bytes in the HF cache ({status.location}) were just"
            f" verified at {status.observed_size} bytes; fix the size in the lock (the"
            " cached blob is shared content and was kept)",
            file=str(lock.path) if lock.path is not None else None,
        )


def _checked_download(
    home: Path, source: HfSource, entry: LockedFile, hub_file: HubFile, snapshot: Path
) -> FileStatus:
    """Full check of a file huggingface_hub just put in the cache; a bad one is removed."""
    where = _where(source, entry.path)
    status = check_hf_entry(home, source, entry, full=True)
    problem = None
    if status.status == UNSAFE:
        raise UnsafePathError(f"{where}: {status.detail}")
    if not _usable(status):
        problem = status.detail or f"{status.status} after the download ({status.describe()})"
    elif hub_file.lfs_sha256 is not None and status.observed_sha256 != hub_file.lfs_sha256:
        problem = f"hub LFS sha256 {hub_file.lfs_sha256}, observed {status.observed_sha256}"
    elif hub_file.size is not None and status.observed_size != hub_file.size:
        problem = f"hub size {hub_file.size}, observed {status.observed_size} bytes"
    if problem is not None:
        _discard(status, snapshot)
        raise IntegrityError(f"{where}: {problem}; the download was discarded from the HF cache")
    return status
