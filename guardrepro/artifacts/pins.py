"""First-download pins kept by the cache, so that ``fetch`` never rewrites a lock file.

Input: a lock with pending entries (``pinned_by = "first-download"``, no sha256 yet)
and the guardrepro home. Output: ``pin_file`` -- where that lock's recorded pins live,
``<home>/pins/<lock name>-<key>.toml`` (a complete lock file, readable and diffable,
whose ``key`` hashes the lock's source and file list, so another lock of the same
name never picks them up); ``with_cached_pins`` -- the lock with those pins filled in.

Invariants: only pending entries take a cached pin, and only from a pin file whose
source and file list equal the lock's; a pin in the lock itself always wins; the
pin file is replaced atomically (``locks.save_lock``). ``guardrepro fetch --out FILE``
writes the pinned lock to FILE instead, for committing it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from guardrepro.artifacts.locks import Lock, load_lock
from guardrepro.artifacts.store import safe_join
from guardrepro.errors import LockError


def _key(lock: Lock) -> str:
    body = [repr(lock.source), [entry.path for entry in lock.files]]
    return hashlib.sha256(json.dumps(body).encode()).hexdigest()[:16]


def pin_file(home: Path, lock: Lock) -> Path:
    """Where the cache keeps this lock's first-download pins (it may not exist)."""
    return safe_join(home, f"pins/{lock.name}-{_key(lock)}.toml")


def with_cached_pins(lock: Lock, home: Path) -> Lock:
    """``lock`` with its pending entries filled from the cache's pin file, if any."""
    return merge_pins(lock, pin_file(home, lock)) if lock.pending else lock


def merge_pins(lock: Lock, path: Path) -> Lock:
    """``lock`` with its pending entries filled from the pinned lock file ``path`` (a
    pin file or a ``fetch --out`` file), if it exists; LockError if it is another lock's."""
    if not lock.pending or not path.is_file():
        return lock
    cached = load_lock(path)
    if cached.source != lock.source or [e.path for e in cached.files] != [
        e.path for e in lock.files
    ]:
        raise LockError(f"pins for another lock (not {lock.path})", file=str(path))
    files = tuple(
        mine if not mine.pending or theirs.pending else theirs
        for mine, theirs in zip(lock.files, cached.files, strict=True)
    )
    return lock.with_files(files)
