"""What a run's writer keeps of each record it holds: a few bytes, not the record.

Input: records (``schema.Record``) with the offset and length of their line in
``records.jsonl``, as ``rundir.records.RecordWriter`` reads or appends them.
Output: ``RecordIndex``, by row id in file order: the line's place, the
record's ``input_sha256`` and status; the count of each status; the first line
of each provenance hash met.

Why: the writer used to keep every ``Record`` (output text, attempts,
provenance), 3 to 9 KB a row in memory; a resume of a million rows needed
gigabytes. The checks a resume makes need only these fields, and a whole
record, when one is wanted (a Ray unit retried), is read back from its line.

Memory: one dict entry per row (the row id string and a bytes value of 13
packed bytes and the 64-character hash, about 250 bytes a row in all).
"""

from __future__ import annotations

import os
import struct
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

from guardrepro.artifacts.store import fsync_dir
from guardrepro.rundir.record_checks import duplicate_row
from guardrepro.schema import RECORD_STATUSES, Record

_ENTRY = struct.Struct("<QIB")  # offset, length, status index; then the input hash's bytes
_STATUS = {name: i for i, name in enumerate(RECORD_STATUSES)}
_READ = 1 << 20


class RecordIndex:
    """The records of one run by row id (module docstring)."""

    def __init__(self) -> None:
        self._entries: dict[str, bytes] = {}
        self.status_counts: dict[str, int] = dict.fromkeys(RECORD_STATUSES, 0)
        # each provenance hash met: (its first record's 0-based line, that row id)
        self.provenances: dict[str, tuple[int, str]] = {}

    def add(self, record: Record, offset: int, length: int) -> None:
        """Index ``record``, whose line is ``length`` bytes at ``offset``; its row id is new."""
        if record.row_id in self._entries:
            raise ValueError(f"row {record.row_id!r} is indexed already")
        self.provenances.setdefault(record.provenance_sha256,
                                    (len(self._entries), record.row_id))
        self._entries[record.row_id] = (_ENTRY.pack(offset, length, _STATUS[record.status])
                                        + record.input_sha256.encode("utf-8"))
        self.status_counts[record.status] += 1

    def move(self, row_id: str, offset: int) -> None:
        """The line of ``row_id`` now starts at ``offset`` (the file was rewritten)."""
        entry = self._entries[row_id]
        _, length, status = _ENTRY.unpack_from(entry)
        self._entries[row_id] = _ENTRY.pack(offset, length, status) + entry[_ENTRY.size:]

    def location(self, row_id: str) -> tuple[int, int]:
        """(offset, length) of the line of ``row_id``'s record."""
        offset, length, _ = _ENTRY.unpack_from(self._entries[row_id])
        return offset, length

    def input_sha256(self, row_id: str) -> str:
        return self._entries[row_id][_ENTRY.size:].decode("utf-8")

    def status(self, row_id: str) -> str:
        return RECORD_STATUSES[_ENTRY.unpack_from(self._entries[row_id])[2]]

    def __contains__(self, row_id: object) -> bool:
        return row_id in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[str]:
        """The row ids in the order their records were indexed (file order)."""
        return iter(self._entries)


class TornRecordWarning(RuntimeWarning):
    """A partial final line was removed from records.jsonl on resume."""


def repair_tail(fd: int, path: Path) -> tuple[int, int]:
    """(the end of the records file's complete lines, the bytes of a torn final
    line cut off, with a ``TornRecordWarning``); the file is read from its end,
    not whole."""
    size = os.fstat(fd).st_size
    if not size:
        fsync_dir(path.parent)  # the file may be new
        return 0, 0
    if os.pread(fd, 1, size - 1) == b"\n":
        return size, 0
    keep = complete_end(fd, size)
    dropped = size - keep
    os.ftruncate(fd, keep)
    os.fsync(fd)
    row = count_lines(fd, keep)
    warnings.warn(
        f"{path}: removed an incomplete final line ({dropped} bytes, line "
        f"{row + 1}) left by an interrupted run; that row will be generated again",
        TornRecordWarning,
        stacklevel=3,
    )
    return keep, dropped


LineParser = Callable[[bytes, int], Record]  # a line (no line break), its 0-based index


def index_lines(fd: int, parse: LineParser, *, file: str, end: int) -> RecordIndex:
    """Every record in the first ``end`` bytes of the records file ``fd`` (whole
    lines), parsed and checked by ``parse``, a line at a time; a duplicate row
    id is an ``InputError`` naming both lines, as ``read_records`` does."""
    index = RecordIndex()
    offset = 0
    with os.fdopen(os.dup(fd), "rb", buffering=_READ) as fh:
        fh.seek(0)
        for line_no, line in enumerate(fh):
            if offset + len(line) > end:
                break
            record = parse(line[:-1], line_no)
            if record.row_id in index:
                first = count_lines(fd, index.location(record.row_id)[0])
                raise duplicate_row(record.row_id, first, file=file, row=line_no)
            index.add(record, offset, len(line))
            offset += len(line)
    return index


def count_lines(fd: int, end: int) -> int:
    """Line breaks in the first ``end`` bytes of ``fd``."""
    count = offset = 0
    while offset < end:
        data = os.pread(fd, min(_READ, end - offset), offset)
        if not data:
            break
        count += data.count(b"\n")
        offset += len(data)
    return count


def complete_end(fd: int, size: int) -> int:
    """The end of the last complete line among the first ``size`` bytes of ``fd``
    (0: none), read backwards from the end."""
    end = size
    while end > 0:
        start = max(0, end - _READ)
        data = os.pread(fd, end - start, start)
        at = data.rfind(b"\n")
        if at >= 0:
            return start + at + 1
        end = start
    return 0
