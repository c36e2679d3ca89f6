"""A cohort file read for a run without holding its rows: one checking pass, then blocks.

Input: a cohort JSONL file and a shard spec (``"k/n"`` or None). Output: a
``CohortScan``: the file's sha256, its row count, the number of rows of the
shard, every row id (for the resume checks), and ``rows()``, which yields the
shard's rows again, in cohort order, a block of lines at a time.

Why: ``schema.read_cohort`` returns every ``CohortRow`` with its whole sample;
at a million rows that alone is gigabytes. ``run`` needs the rows one chunk at
a time, twice (the up-front checks, then generation), and their ids.

Invariants:

- the scan checks every line as ``schema.read_cohort`` does (the same errors,
  naming file and line; a duplicate id names the line of its first use) and
  hashes the same bytes, so a malformed cohort is refused before anything else;
- the file stays open (one descriptor) from the scan to the end of the run,
  and each block (``BLOCK_LINES`` lines or ``BLOCK_BYTES`` bytes, whichever
  comes first) is re-read by offset and checked
  against the sha256 the scan took of it: a file edited in place since the scan
  is an ``IntegrityError`` naming the file and the lines, never a row the
  manifest's cohort hash does not cover (a file replaced by rename is not seen:
  the descriptor still reads the scanned one);
- memory: the ids (one string each, in a set) and about 100 bytes per block;
  no row is kept.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from guardrepro.errors import InputError, IntegrityError
from guardrepro.rundir.cohort import parse_cohort_line
from guardrepro.rundir.shard import format_shard, parse_shard, shard_of
from guardrepro.schema import CohortRow

BLOCK_LINES = 4096
BLOCK_BYTES = 1 << 20  # a block is cut at whichever limit comes first
_READ = 1 << 20


@dataclass(frozen=True)
class _Block:
    offset: int
    size: int
    first_line: int
    lines: int
    sha256: bytes


@dataclass
class CohortScan:
    """What one checking pass over a cohort file found (module docstring)."""

    path: Path
    fd: int
    sha256: str
    rows_in_cohort: int
    rows_selected: int
    shard: str | None  # canonical "k/n"
    ids: set[str]
    _blocks: list[_Block] = field(default_factory=list)

    def rows(self, limit: int | None = None) -> Iterator[CohortRow]:
        """The shard's rows in cohort order (the first ``limit`` of them), re-read
        a block at a time and checked against the scan's hashes."""
        if limit is not None and limit <= 0:
            return
        k, n = parse_shard(self.shard) if self.shard is not None else (1, 1)
        given = 0
        for block in self._blocks:
            data = os.pread(self.fd, block.size, block.offset)
            if len(data) != block.size or hashlib.sha256(data).digest() != block.sha256:
                last = block.first_line + block.lines
                raise IntegrityError(
                    f"{self.path}: lines {block.first_line + 1}-{last} changed while the "
                    "run was reading the file (its sha256 no longer matches the one taken "
                    "at the start); refusing rows the manifest's cohort hash does not cover")
            for offset, raw in enumerate(_split(data)):
                row = parse_cohort_line(raw, file=str(self.path), index=block.first_line + offset)
                if n > 1 and shard_of(row.row_id, n) != k:
                    continue
                yield row
                given += 1
                if limit is not None and given >= limit:
                    return

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> CohortScan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _split(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def _open(path: Path) -> int:
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise InputError("cohort file not found", file=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read cohort file: {exc}", file=str(path)) from None


def scan_cohort(path: str | Path, shard: str | None = None) -> CohortScan:
    """Check and hash ``path`` in one pass (module docstring); the caller closes
    the scan (a context manager)."""
    path = Path(path)
    k, n = parse_shard(shard) if shard is not None else (1, 1)
    fd = _open(path)
    try:
        return _scan(path, fd, k, n, None if shard is None else format_shard(k, n))
    except BaseException:
        os.close(fd)
        raise


def _scan(path: Path, fd: int, k: int, n: int, shard: str | None) -> CohortScan:
    whole = hashlib.sha256()
    ids: set[str] = set()
    blocks: list[_Block] = []
    selected = lines = offset = 0
    for chunk in _chunks(fd):
        whole.update(chunk)
        raws = _split(chunk)
        for index, raw in enumerate(raws, start=lines):
            row_id = parse_cohort_line(raw, file=str(path), index=index).row_id
            if row_id in ids:
                raise _duplicate(path, row_id, index)
            ids.add(row_id)
            if n == 1 or shard_of(row_id, n) == k:
                selected += 1
        blocks.append(_Block(offset, len(chunk), lines, len(raws),
                             hashlib.sha256(chunk).digest()))
        lines += len(raws)
        offset += len(chunk)
    if not lines:
        raise InputError("cohort file is empty", file=str(path))
    return CohortScan(path, fd, whole.hexdigest(), lines, selected, shard, ids, blocks)


def _chunks(fd: int) -> Iterator[bytes]:
    """The file's bytes in pieces of whole lines, ``BLOCK_LINES`` lines or
    ``BLOCK_BYTES`` bytes, whichever comes first, but at least one line (the
    last piece as it ends, with or without a line break)."""
    with os.fdopen(os.dup(fd), "rb", buffering=_READ) as fh:
        piece: list[bytes] = []
        size = 0
        for line in fh:
            piece.append(line)
            size += len(line)
            if len(piece) >= BLOCK_LINES or size >= BLOCK_BYTES:
                yield b"".join(piece)
                piece, size = [], 0
        if piece:
            yield b"".join(piece)


def _duplicate(path: Path, row_id: str, index: int) -> InputError:
    """The error ``read_cohort`` gives: the line of the id's first use is looked up
    again (kept only as a set while scanning)."""
    first = 0
    with open(path, "rb") as fh:
        for first, raw in enumerate(fh):
            body = raw[:-1] if raw.endswith(b"\n") else raw
            if parse_cohort_line(body, file=str(path), index=first).row_id == row_id:
                break
    return InputError(f"duplicate sample_id {row_id!r} (first at line {first + 1})",
                      file=str(path), row=index, line=index + 1, field="sample.sample_id")
