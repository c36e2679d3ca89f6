"""The tree hash of a directory, and its cache under the guardrepro home.

Input: a directory (``tree_hash``), and the home (``cached_tree_hash``).
Output: a :class:`TreeHash` (sha256, file count, byte count).

Tree hash (docs/PROTOCOL.md, "Pins"): every regular file below the directory,
sorted by relative POSIX path; one sha256 fed, per file, with the path length (8
bytes big-endian), the UTF-8 path, the size (8 bytes big-endian), then the bytes.
Symlinks are refused.

``cached_tree_hash(directory, home)`` is the same hash, remembered under the
home's ``state/trees/<sha256 of the directory path>.json`` together with every
file's stamp (relative path -> device, inode, size, mtime and ctime in ns; the
same record ``verify.check_tree`` keeps for "local" locks): a
later call whose stamps all match returns it without reading a byte; any
added, removed, replaced or touched file recomputes it in full. Callers use it
right after ``fetch.materialize`` (which trusts the same kind of stamps), so a
pinned checkpoint is not read twice per run.

Invariant: a value is stored only when no stamp changed while hashing; a file
that changes size while it is read is an ``IntegrityError``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from guardrepro.artifacts.store import (
    CHUNK,
    atomic_write_bytes,
    ensure_dir,
    guardrepro_home,
    open_regular,
    safe_join,
    verify_full_requested,
    walk_files,
)
from guardrepro.errors import IntegrityError


@dataclass(frozen=True)
class TreeHash:
    """Tree hash of a directory, with its file count and total byte count."""

    sha256: str
    files: int
    bytes: int


def tree_hash(directory: str | os.PathLike[str]) -> TreeHash:
    """Tree hash of ``directory`` as docs/PROTOCOL.md defines it; UnsafePathError on symlinks."""
    root = Path(directory)
    digest = hashlib.sha256()
    count = total = 0
    for rel, path in walk_files(root):
        encoded = rel.encode("utf-8")
        with os.fdopen(open_regular(path), "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            digest.update(len(encoded).to_bytes(8, "big"))
            digest.update(encoded)
            digest.update(size.to_bytes(8, "big"))
            seen = 0
            while chunk := fh.read(CHUNK):
                digest.update(chunk)
                seen += len(chunk)
        if seen != size:
            raise IntegrityError(f"{path}: changed while hashing ({size} -> {seen} bytes)")
        count += 1
        total += size
    return TreeHash(digest.hexdigest(), count, total)


def cached_tree_hash(
    directory: str | os.PathLike[str], home: str | os.PathLike[str] | None = None
) -> TreeHash:
    """``tree_hash(directory)``, reusing the value stored under ``home`` while
    every file's stamp is unchanged (see the module docstring)."""
    return cached_tree(guardrepro_home(home), Path(directory), full=False)


def _tree_state_file(home: Path, directory: Path) -> Path:
    key = hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:32]
    return safe_join(home, f"state/trees/{key}.json")


def _tree_stats(directory: Path) -> dict[str, list[int]]:
    """Per file below ``directory``: device, inode, size, mtime_ns, ctime_ns."""
    stats = {}
    for rel, path in walk_files(directory):
        st = os.stat(path, follow_symlinks=False)
        stats[rel] = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    return stats


def cached_tree(home: Path, directory: Path, *, full: bool) -> TreeHash:
    """The tree hash of ``directory``: from ``state/trees`` when every file's
    stamp matches the stored ones (unless ``full``), else computed in full and
    stored (only when no stamp changed while hashing)."""
    state_file = _tree_state_file(home, directory)
    stats = _tree_stats(directory)
    if not full and not verify_full_requested():
        try:
            saved = json.loads(state_file.read_text())
            if saved.get("stats") == stats and saved.get("tree") is not None:
                return TreeHash(**saved["tree"])
        except (OSError, ValueError, TypeError):
            pass
    observed = tree_hash(directory)
    if stats == _tree_stats(directory):
        ensure_dir(home, "state/trees")
        body = {"stats": stats, "tree": dataclasses.asdict(observed)}
        atomic_write_bytes(state_file, json.dumps(body).encode())
    return observed
