"""What ``guardrepro fetch`` will do for each file a lock pins that is not in the cache.

Input: a loaded :class:`~guardrepro.artifacts.locks.Lock` and the
:class:`~guardrepro.artifacts.verify.VerifyReport` of the cache. Output: one
:class:`PlannedFile` per file the report finds missing or not yet pinned: where
fetch gets it (hub repo and revision, GitHub URL at the commit, the package) and
what it checks the bytes against (a published sha256/size, one recorded at an
earlier first download, or nothing yet: the pin is recorded at this first download).

Nothing is read from the network; a cached blob is only looked up by its name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from guardrepro.artifacts.fetch import github_url
from guardrepro.artifacts.locks import (
    GithubSource,
    HfSource,
    LocalSource,
    Lock,
    LockedFile,
    PackageSource,
)
from guardrepro.artifacts.paths import package_file
from guardrepro.artifacts.store import blob_path
from guardrepro.artifacts.verify import MISSING, UNPINNED, VerifyReport

PUBLISHED, PINNED, RECORDED, FIRST_DOWNLOAD, PARTLY_PUBLISHED, CACHED, IN_PLACE = (
    "published", "pinned", "recorded", "first-download", "partly-published", "cached",
    "in-place")
# where first-download pins go (``guardrepro.artifacts.pins``): the lock is not rewritten
PIN_PLACE = "the cache's pin file (or `fetch --out FILE`)"


@dataclass(frozen=True)
class PlannedFile:
    """One file fetch still has to bring: ``source`` (where from), ``check`` (one of
    published (an upstream hash), pinned (the project's own files), recorded,
    first-download, partly-published, cached, in-place),
    the sha256/size it will be held to (None: recorded at this download) and
    ``action``, the same in one sentence."""

    path: str
    source: str
    check: str
    sha256: str | None
    size: int | None
    action: str


def _source(lock: Lock, entry: LockedFile) -> str:
    source = lock.source
    if isinstance(source, HfSource):
        kind = "" if source.repo_type == "model" else f" ({source.repo_type})"
        return f"hf://{source.repo}@{source.revision}/{entry.path}{kind}"
    if isinstance(source, GithubSource):
        return github_url(source, entry)
    if isinstance(source, PackageSource):
        return f"the guardrepro package ({package_file(lock, entry)})"
    assert isinstance(source, LocalSource)
    return str(lock.local_dir() / entry.path)


def _first_download_rule(lock: Lock) -> str:
    if isinstance(lock.source, HfSource):
        return ("the hub's LFS sha256 (its ETag, checked against the downloaded bytes; for a"
                " small non-LFS file the sha256 of its bytes)")
    return "the sha256 of the downloaded bytes"


def _check(lock: Lock, entry: LockedFile) -> tuple[str, str]:
    """(check kind, what fetch checks or records) for one entry."""
    rule = _first_download_rule(lock)
    later = "; any other bytes are refused afterwards"
    if entry.sha256 is None and entry.size is None:
        return FIRST_DOWNLOAD, (f"no hash is pinned yet: fetch records {rule} and the size in"
                                f" {PIN_PLACE} at this first verified download{later}")
    if entry.sha256 is None:
        return PARTLY_PUBLISHED, (f"checked against the published size {entry.size} bytes;"
                                  f" fetch records {rule} in {PIN_PLACE}{later}")
    if entry.size is None:
        return PARTLY_PUBLISHED, (f"verified against the published sha256 {entry.sha256};"
                                  f" fetch records its size in {PIN_PLACE}{later}")
    if entry.pinned_at is not None:
        return RECORDED, (f"verified against sha256 {entry.sha256} ({entry.size} bytes),"
                          f" recorded at its first download on {entry.pinned_at.isoformat()}")
    if isinstance(lock.source, HfSource | GithubSource):
        return PUBLISHED, (f"verified against the published sha256 {entry.sha256}"
                           f" ({entry.size} bytes) pinned in the lock")
    return PINNED, (f"verified against the sha256 {entry.sha256} ({entry.size} bytes)"
                    " pinned in the lock")


def plan_file(lock: Lock, entry: LockedFile, home: Path) -> PlannedFile:
    """What fetch will do for ``entry`` (assumed absent from the lock's directory)."""
    source = _source(lock, entry)
    if isinstance(lock.source, LocalSource):
        return PlannedFile(entry.path, source, IN_PLACE, entry.sha256, entry.size,
                           f"{entry.path}: not fetched: a local lock is verified in place;"
                           f" the file must exist at {source}")
    if not entry.pending and entry.sha256 is not None and blob_path(home,
                                                                     entry.sha256).is_file():
        return PlannedFile(entry.path, source, CACHED, entry.sha256, entry.size,
                           f"{entry.path}: already in the cache as blob {entry.sha256}:"
                           " fetch re-checks and links it (no download)")
    check, text = _check(lock, entry)
    verb = "copy from" if isinstance(lock.source, PackageSource) else "download"
    return PlannedFile(entry.path, source, check, entry.sha256, entry.size,
                       f"{entry.path}: {verb} {source}; {text}")


def fetch_plan(lock: Lock, report: VerifyReport, home: Path) -> tuple[PlannedFile, ...]:
    """The planned fetch of every file ``report`` finds missing or not yet pinned."""
    absent = {f.path for f in report.files
              if f.status == MISSING or (f.status == UNPINNED and f.observed_sha256 is None)}
    return tuple(plan_file(lock, entry, home) for entry in lock.files if entry.path in absent)
