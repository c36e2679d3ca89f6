"""Where a lock's files are expected to be: package files, local dirs, cache dirs.

Input: a :class:`~guardrepro.artifacts.locks.Lock` and the guardrepro home.
Output: paths (nothing is read or written here besides ``exists`` checks).

Invariants: the materialized directory of a cache-backed lock (github, hf, package)
is ``<home>/artifacts/<lock name>/<id>`` where ``id`` depends on the source revision
and on every (path, sha256) pin, so a lock whose pins change gets a new directory and
a stale directory is never mistaken for the new one; pending pins have no directory.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import guardrepro
from guardrepro.artifacts.locks import GithubSource, HfSource, Lock, LockedFile, PackageSource
from guardrepro.artifacts.store import safe_join
from guardrepro.errors import MissingArtifactError


def package_root() -> Path:
    """The directory of the installed guardrepro package."""
    return Path(guardrepro.__file__).resolve().parent


def package_file(lock: Lock, entry: LockedFile) -> Path:
    """Path of a "package" source file inside the guardrepro package (symlinks refused)."""
    assert isinstance(lock.source, PackageSource)
    base = package_root()
    if lock.source.dir is not None:
        base = safe_join(base, lock.source.dir)
    return safe_join(base, entry.path)


def fetch_hint(lock: Lock) -> str:
    """The command that fills the cache for this lock."""
    return f"run `guardrepro fetch {lock.path or lock.name}`"


def dir_id(lock: Lock) -> str:
    """Name of the lock's materialized directory; MissingArtifactError while pending."""
    if lock.pending:
        raise MissingArtifactError(
            f"lock {lock.name!r}: {lock.pending[0].path} has no recorded sha256 yet"
            f" (first-download pin); {fetch_hint(lock)}"
        )
    pins = [[entry.path, entry.sha256] for entry in sorted(lock.files, key=lambda e: e.path)]
    digest = hashlib.sha256(json.dumps(pins, separators=(",", ":")).encode()).hexdigest()
    if isinstance(lock.source, GithubSource):
        return f"{lock.source.commit[:12]}-{digest[:12]}"
    if isinstance(lock.source, HfSource):
        return f"{lock.source.revision[:12]}-{digest[:12]}"
    return digest[:16]


def artifact_dir(home: Path, lock: Lock) -> Path:
    """The verified-directory location of a lock (may not exist yet).

    For a "local" source that is the source directory itself.
    """
    if lock.source.type == "local":
        return lock.local_dir()
    return safe_join(home, f"artifacts/{lock.name}/{dir_id(lock)}")
