"""Verification stamps kept many to a file: the form ``verify`` writes them in.

Input: the stamp directory (``<home>/state/verified``) and a file's ``lstat``.
Output: the stamp a pack holds for that file's inode, as the dictionary a
single stamp file (``store.write_stamp``) holds, which ``store.stamp_matches``
then checks in exactly the same way; and the text of a pack, for the writer
(``verify_fast``).

Why: one stamp file per pinned file made ``verify`` of 200,000 files create
200,000 files in one directory, about 200 us each on this machine's disk
(more than 40 s), whatever the rest cost. ``verify`` now writes its stamps
into ``PACKS`` files per device, chosen by inode (``pack_name``), each read,
merged and replaced once per run.

Format (text, one stamp a line after a version line; fields separated by one
space): ``ino size mtime_ns ctime_ns sha256 sampled``. A line that does not
have this form is ignored (its file is then hashed in full), never trusted.

Invariants: a pack entry proves what a stamp file proves and nothing more
(``store.stamp_matches`` compares the same inode, size, mtime, ctime and
sampled digest); a pack is replaced atomically (a reader sees the old or the
new one); two writers of one pack at once keep the later one's entries, and
the other's files are hashed again the next time (the stamps are a cache).
"""

from __future__ import annotations

import os
import re
import stat
import threading
from pathlib import Path
from typing import Any

PACKS = 256  # pack files per device
VERSION = "guardrepro-stamps 1\n"
_LINE = re.compile(r"(\d+) (\d+) (-?\d+) (-?\d+) ([0-9a-f]{64}) ([0-9a-f]{64})")
_CACHE_LIMIT = 2 * PACKS
# never through a link; a FIFO planted at a pack is not waited on
_OPEN = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
         | getattr(os, "O_CLOEXEC", 0))
_cache: dict[str, tuple[tuple[int, int, int, int], dict[int, str]]] = {}
_cache_lock = threading.Lock()


def pack_name(dev: int, ino: int) -> str:
    """The pack (a name in the stamp directory) that holds the stamp of ``(dev, ino)``."""
    return f"pack-{dev}-{ino % PACKS:02x}.stamps"


def stamp_line(st: os.stat_result, sha256: str, sampled: str) -> str:
    """The pack line of the file whose stat is ``st`` (the facts a stamp records)."""
    return (f"{st.st_ino} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns} "
            f"{sha256} {sampled}\n")


def parse_pack(text: str) -> dict[int, str]:
    """The lines of a pack by inode (later lines win); a pack of another
    version is empty."""
    if not text.startswith(VERSION):
        return {}
    lines: dict[int, str] = {}
    for line in text[len(VERSION):].splitlines(keepends=True):
        ino, _, _ = line.partition(" ")
        if ino.isdigit():
            lines[int(ino)] = line
    return lines


def pack_text(lines: dict[int, str]) -> str:
    """A pack's text (lines in inode order, so equal stamps give equal bytes)."""
    return VERSION + "".join(lines[ino] for ino in sorted(lines))


def _read_ascii(fd: int) -> str:
    """The rest of ``fd`` as text ("" when it is not ASCII; OSError as raised)."""
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    try:
        return b"".join(chunks).decode("ascii")
    except UnicodeDecodeError:
        return ""


def read_pack(name: str | Path, dir_fd: int | None = None) -> str:
    """The text of the pack ``name`` (relative to ``dir_fd`` when given), never
    through a link: "" when it is missing, not a file, unreadable or not ASCII."""
    try:
        fd = os.open(name, _OPEN, dir_fd=dir_fd)
    except OSError:
        return ""
    try:
        return _read_ascii(fd) if stat.S_ISREG(os.fstat(fd).st_mode) else ""
    except OSError:
        return ""
    finally:
        os.close(fd)


def _pack_lines(path: Path) -> dict[int, str]:
    """``parse_pack`` of the pack at ``path``, reused while its inode, size,
    mtime and ctime are unchanged ({} when it is missing or not a file)."""
    try:
        fd = os.open(path, _OPEN)
    except OSError:
        return {}
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return {}
        key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        found = _cache.get(str(path))
        if found is not None and found[0] == key:
            return found[1]
        lines = parse_pack(_read_ascii(fd))
    except OSError:
        return {}
    finally:
        os.close(fd)
    with _cache_lock:
        if len(_cache) >= _CACHE_LIMIT:
            _cache.clear()
        _cache[str(path)] = (key, lines)
    return lines


def packed_stamp(directory: Path, st: os.stat_result) -> dict[str, Any] | None:
    """The stamp a pack in ``directory`` holds for the file whose ``lstat`` is
    ``st``, in ``store.write_stamp``'s keys; None when there is none or its line
    is malformed."""
    line = _pack_lines(directory / pack_name(st.st_dev, st.st_ino)).get(st.st_ino)
    found = _LINE.fullmatch(line.rstrip("\n")) if line is not None else None
    if found is None:
        return None
    ino, size, mtime, ctime, sha256, sampled = found.groups()
    return {"sha256": sha256, "size": int(size), "ino": int(ino), "mtime_ns": int(mtime),
            "ctime_ns": int(ctime), "sampled": sampled}
