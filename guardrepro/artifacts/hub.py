"""Hugging Face Hub download of pinned checkpoint files through huggingface_hub.

Input: an ``hf`` lock source (repo + 40-hex revision), the file entries to get, a
staging directory under the guardrepro home. Output: for each file, a real file in
the staging directory, its observed sha256 and size, and what the hub claimed.

Invariants: ``HF_ENDPOINT`` is read at call time and passed explicitly, so it need not
be set before huggingface_hub is imported; every listed file is resolved (HEAD) before
any byte is downloaded, so a file the hub lacks fails the fetch up front; the hub must
report the pinned revision as the commit it served; for an LFS file the hub's sha256
(its ETag) must equal the hash of the local bytes and any pin in the lock; sizes must
agree with the hub and the lock. Downloads go to ``local_dir`` (real files, never
symlinks into the hub cache); a bad file is deleted before the error is raised.
Network and server trouble that huggingface_hub did not overcome raises
TransientFetchError (exit 4); a full or read-only local disk raises OutputError.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardrepro.artifacts.locks import HfSource, LockedFile
from guardrepro.artifacts.store import check_relpath, output_error, safe_join, sha256_file
from guardrepro.errors import FetchError, IntegrityError, TransientFetchError, UnsafePathError
from guardrepro.spec import HEX64


@dataclass(frozen=True)
class HubFile:
    """What the hub says about one file at the pinned revision."""

    path: str
    commit: str
    etag: str
    size: int | None
    lfs_sha256: str | None  # the ETag when it is a sha256 (an LFS file), else None


@dataclass(frozen=True)
class HubDownload:
    """A verified file in the staging dir."""

    path: str
    local: Path
    sha256: str
    size: int
    lfs_sha256: str | None


# errors of the local disk during a hub download: exit 2 with the path, not 4
LOCAL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.ENOTDIR)

def _endpoint() -> str | None:
    value = os.environ.get("HF_ENDPOINT")
    return value.rstrip("/") if value else None


def _where(source: HfSource, path: str) -> str:
    return f"{path} in hf://{source.repo}@{source.revision}"


def _hub() -> Any:
    import huggingface_hub

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


def _quiet_tqdm() -> type:
    from tqdm.auto import tqdm

    class Quiet(tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return Quiet


def download(
    source: HfSource, entry: LockedFile, hub_file: HubFile, staging: Path, *, progress: bool
) -> HubDownload:
    """hf_hub_download one resolved file into ``staging`` and check its bytes."""
    hub = _hub()
    where = _where(source, entry.path)
    check_relpath(entry.path)
    try:
        returned = hub.hf_hub_download(
            source.repo,
            entry.path,
            repo_type=source.repo_type,
            revision=source.revision,
            local_dir=staging,
            endpoint=_endpoint(),
            tqdm_class=None if progress else _quiet_tqdm(),
        )
    except Exception as exc:
        if isinstance(exc, OSError) and exc.errno in LOCAL_ERRNOS:
            raise output_error(staging, exc) from None  # our disk, not the hub
        raise TransientFetchError(
            f"{where}: download failed: {type(exc).__name__}: {exc}"
        ) from None
    local = safe_join(staging, entry.path)
    if Path(returned).resolve() != local.resolve():
        raise UnsafePathError(f"{where}: huggingface_hub wrote {returned}, expected {local}")
    sha, size = sha256_file(local)  # refuses a symlink
    problem = None
    if hub_file.lfs_sha256 is not None and sha != hub_file.lfs_sha256:
        problem = f"hub LFS sha256 {hub_file.lfs_sha256}, observed {sha}"
    elif entry.sha256 is not None and sha != entry.sha256:
        problem = f"expected sha256 {entry.sha256}, observed {sha}"
    elif hub_file.size is not None and size != hub_file.size:
        problem = f"hub size {hub_file.size}, observed {size} bytes"
    elif entry.size is not None and size != entry.size:
        problem = f"expected size {entry.size}, observed {size} bytes"
    if problem is not None:
        local.unlink()
        raise IntegrityError(f"{where}: {problem}; the download was discarded")
    return HubDownload(entry.path, local, sha, size, hub_file.lfs_sha256)
