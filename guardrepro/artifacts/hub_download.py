"""Hub file downloads into the HF cache that never write more than the expected size.

Input: an ``hf`` lock source, the lock entries to download and, for each, what the
hub claimed on HEAD (``guardrepro.artifacts.hub.HubFile``).
Output: the files in the user's HF cache, downloaded one ``hf_hub_download`` per file
(a few in parallel) at the pinned revision; the caller verifies them in place.

Invariants: each file has a byte limit, the lock's ``size`` or, for a first-download
pin, the size the hub attested on HEAD; a file with neither is refused before any
byte is asked for. The limit is enforced through the ``tqdm_class`` hook: huggingface_hub's
``http_get`` calls the bar's ``update(len(chunk))`` before it writes the chunk, and
the bar given here raises ``TooManyBytes`` when the count would pass the limit, so the
temporary file never holds more than the limit. huggingface_hub (2.x) deletes its
process-unique ``<etag>.<id>.incomplete`` file when the download raises; every
``.incomplete`` file of that blob this call created, and any one of it larger than
the limit, is removed here as well (older versions keep ``<etag>.incomplete`` for a
resume). More bytes than the limit is a TransientFetchError (exit 4) naming the file.
Xet-backed files are reconstructed by hf_xet to the HEAD size, which ``resolve``
has already compared with the lock.
"""

from __future__ import annotations

import errno
import glob
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from guardrepro.artifacts import hf_cache
from guardrepro.artifacts.locks import HfSource, LockedFile
from guardrepro.artifacts.nofollow import output_error
from guardrepro.artifacts.store import check_relpath
from guardrepro.errors import IntegrityError, TransientFetchError, UnsafePathError

MAX_WORKERS = 8  # snapshot_download's default
# errors of the local disk during a hub download: exit 2 with the path, not 4
LOCAL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.ENOTDIR)


class TooManyBytes(Exception):
    """The server sent more than ``limit`` bytes (at least ``seen``)."""

    def __init__(self, limit: int, seen: int) -> None:
        super().__init__(limit, seen)
        self.limit, self.seen = limit, seen


def bounded_bar(limit: int, *, progress: bool) -> type:
    """A tqdm class whose count (``initial`` plus every ``update``) may not pass
    ``limit``: the update that would pass it raises TooManyBytes instead."""
    from tqdm.auto import tqdm

    class Bounded(tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = not progress
            kwargs.pop("name", None)  # huggingface_hub's own tqdm takes it; tqdm does not
            super().__init__(*args, **kwargs)
            self.guard_bytes = int(kwargs.get("initial") or 0)
            if self.guard_bytes > limit:
                raise TooManyBytes(limit, self.guard_bytes)

        def update(self, n: float | None = 1) -> bool | None:
            count = self.guard_bytes + int(n or 0)
            if count > limit:
                raise TooManyBytes(limit, count)
            self.guard_bytes = count
            return super().update(n)

    return Bounded


def byte_limit(source: HfSource, entry: LockedFile, hub_size: int | None) -> int:
    """The most bytes ``entry`` may have: the lock's size, else the hub's attested size."""
    if entry.size is not None:
        return entry.size
    if hub_size is None:
        raise IntegrityError(
            f"{entry.path} in hf://{source.repo}@{source.revision}: not pinned: the hub"
            " attested no size for it, so a body cut short or too long cannot be told"
            " apart; nothing was downloaded"
        )
    return hub_size


def _incomplete(blobs: Path, etag: str) -> set[Path]:
    return set(blobs.glob(glob.escape(etag) + "*.incomplete")) if blobs.is_dir() else set()


def _drop_incomplete(blobs: Path, etag: str, before: set[Path], limit: int) -> None:
    """Remove the blob's ``.incomplete`` files this call created, and any over ``limit``."""
    for path in _incomplete(blobs, etag):
        try:
            if path not in before or os.lstat(path).st_size > limit:
                path.unlink()
        except FileNotFoundError:
            pass  # huggingface_hub removed it meanwhile


def download_file(
    source: HfSource, entry: LockedFile, etag: str, limit: int, *, progress: bool
) -> None:
    """``hf_hub_download`` one file at the pinned revision, at most ``limit`` bytes."""
    import huggingface_hub

    check_relpath(entry.path)
    cache = hf_cache.hub_cache_dir()
    where = f"{entry.path} in hf://{source.repo}@{source.revision}"
    blobs = hf_cache.repo_folder(source, cache) / "blobs"
    before = _incomplete(blobs, etag)
    endpoint = os.environ.get("HF_ENDPOINT")
    try:
        returned = huggingface_hub.hf_hub_download(
            source.repo,
            entry.path,
            repo_type=source.repo_type,
            revision=source.revision,
            cache_dir=cache,
            endpoint=endpoint.rstrip("/") if endpoint else None,
            tqdm_class=bounded_bar(limit, progress=progress),
        )
    except TooManyBytes as exc:
        _drop_incomplete(blobs, etag, before, limit)
        kind = "pinned" if entry.size is not None else "attested"
        raise TransientFetchError(
            f"{where}: the server sent more than the {limit} {kind} bytes (at least"
            f" {exc.seen}); writing stopped at {limit} bytes and the partial file was"
            " discarded from the HF cache"
        ) from None
    except Exception as exc:
        if isinstance(exc, OSError) and exc.errno in LOCAL_ERRNOS:
            raise output_error(cache, exc) from None  # our disk, not the hub
        raise TransientFetchError(
            f"{where}: download into the HF cache {cache} failed:"
            f" {type(exc).__name__}: {exc}"
        ) from None
    expected = hf_cache.snapshot_dir(source, cache) / entry.path
    if _real_parent(Path(returned)) != _real_parent(expected):
        raise UnsafePathError(f"{where}: huggingface_hub returned {returned}, expected {expected}")


def _real_parent(path: Path) -> Path:
    """The path with its directories resolved, its last part (a symlink) kept."""
    return Path(os.path.realpath(path.parent)) / path.name


def download_files(
    source: HfSource, jobs: list[tuple[LockedFile, str, int]], *, progress: bool
) -> None:
    """Download every ``(entry, hub etag, byte limit)``, a few at a time; the first
    failure (in the order given) is raised once all have ended."""
    if not jobs:
        return
    with ThreadPoolExecutor(max_workers=min(MAX_WORKERS, len(jobs))) as pool:
        futures = [
            pool.submit(download_file, source, entry, etag, limit, progress=progress)
            for entry, etag, limit in jobs
        ]
    for future in futures:
        future.result()
