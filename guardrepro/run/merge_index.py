"""The records of shard runs and the cohort's row ids, read for a merge without
holding the records.

Input: a shard run's ``records.jsonl`` (and its manifest), a cohort file.
Output: ``RecordIndex`` per source (the file's sha256, and per row id where
its line lies, packed in one integer) and the cohort's row ids in order;
``write_merged`` copies the lines, in the order asked, into the merged
records file.

Why: ``merge`` (and so ``run --workers N``, which merges its shards) parsed
every record of every shard into memory, then serialised them all into one
string: gigabytes at a million rows. Now each line is parsed once, checked
as ``rundir.records.parse_records`` and ``check_one_provenance`` check it
(the same errors, naming file and line, in the same precedence: a torn last
line first, then the first line that does not parse, then the first foreign
provenance), and only its place is kept (about 150 bytes a row with its id).

Invariants: the merged file holds, for each row, ``record_line`` of the
parsed record, as before: the line's own bytes when they are already that
serialisation (what ``RecordWriter`` writes; checked per line at the scan),
else the line parsed again and serialised; each source is hashed again after
the copy, and a source whose bytes changed since the scan is an
``IntegrityError`` (nothing is put in place).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from guardrepro.artifacts.nofollow import NOFOLLOW, output_error
from guardrepro.artifacts.store import sha256_fd
from guardrepro.errors import InputError, IntegrityError, ProvenanceError
from guardrepro.rundir.manifest import RunManifest, mixed_provenance
from guardrepro.rundir.record_checks import (
    ParserLookup,
    duplicate_row,
    once_per_guard,
    torn_last_line,
)
from guardrepro.rundir.records import parse_record_line, record_line
from guardrepro.rundir.stream import cohort_rows

_READ = 1 << 20
_CANONICAL = 1  # the packed place's low bit: the line is record_line of its record


def _lines(fd: int, digest: hashlib._Hash | None = None) -> Iterator[tuple[int, bytes]]:
    """(offset, line without its line break) of every line read from ``fd``
    (position 0 on); ``digest`` is fed every byte read. A last line without a
    line break is yielded too."""
    offset, rest = 0, b""
    while chunk := os.read(fd, _READ):
        if digest is not None:
            digest.update(chunk)
        data = rest + chunk
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            yield offset + start, data[start:end]
            start = end + 1
        offset += start
        rest = data[start:]
    if rest:
        yield offset, rest


def _hash(fd: int) -> str:
    """The sha256 of the whole open file ``fd`` (``artifacts.store.sha256_fd`` from its start)."""
    os.lseek(fd, 0, os.SEEK_SET)
    return sha256_fd(fd)[0]


@dataclass
class RecordIndex:
    """One source's records file, open, with the place of each row's line."""

    path: Path
    fd: int
    sha256: str = ""
    rows: dict[str, int] = field(default_factory=dict)  # id -> offset << 33 | length << 1 | canon

    def line(self, row_id: str, parsers: ParserLookup | None) -> bytes:
        """The row's line in ``records.jsonl`` form (with its line break)."""
        place = self.rows[row_id]
        offset, length = place >> 33, (place >> 1) & 0xFFFFFFFF
        data = os.pread(self.fd, length, offset)
        if place & _CANONICAL:
            return data + b"\n"
        record = parse_record_line(data, file=str(self.path), row=0, parsers=parsers)
        return record_line(record).encode("utf-8")

    def check_unchanged(self) -> None:
        if _hash(self.fd) != self.sha256:
            raise IntegrityError(f"{self.path}: changed while it was being merged (its sha256 "
                                 "is no longer the one read); nothing was merged")

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def index_records(path: Path, manifest: RunManifest, parsers: ParserLookup | None
                  ) -> RecordIndex:
    """Scan ``path`` (see the module docstring); the caller closes the index."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    index = RecordIndex(path, fd)
    try:
        _scan(index, manifest, once_per_guard(parsers))
    except BaseException:
        index.close()
        raise
    return index


def _scan(index: RecordIndex, manifest: RunManifest, parsers: ParserLookup | None) -> None:
    fd, file = index.fd, str(index.path)
    size = os.fstat(fd).st_size
    if size and os.pread(fd, 1, size - 1) != b"\n":
        raise torn_last_line(file=file, row=sum(1 for _ in _lines(fd)) - 1)
    digest = hashlib.sha256()
    foreign: ProvenanceError | None = None
    rows = index.rows
    for number, (offset, line) in enumerate(_lines(fd, digest)):
        record = parse_record_line(line, file=file, row=number, parsers=parsers)
        row_id = record.row_id
        if row_id in rows:
            first = next(i for i, key in enumerate(rows) if key == row_id)
            raise duplicate_row(row_id, first, file=file, row=number)
        if foreign is None and record.provenance_sha256 != manifest.provenance_sha256:
            foreign = mixed_provenance(index.path, number, row_id, record.provenance_sha256,
                                       manifest, refusing="merge")
        canonical = record_line(record).encode("utf-8") == line + b"\n"
        rows[row_id] = offset << 33 | len(line) << 1 | canonical
    if foreign is not None:
        raise foreign
    index.sha256 = digest.hexdigest()


def cohort_ids(path: Path) -> list[str]:
    """The cohort's row ids in order, each line checked as
    ``rundir.cohort.read_cohort`` checks it (the same errors), read a line at a
    time (``rundir.stream.cohort_rows``)."""
    ids: list[str] = []
    seen: set[str] = set()
    try:
        for index, row in cohort_rows(path):
            row_id = row.row_id
            if row_id in seen:
                raise InputError(
                    f"duplicate sample_id {row_id!r} (first at line {ids.index(row_id) + 1})",
                    file=str(path), row=index, line=index + 1, field="sample.sample_id")
            seen.add(row_id)
            ids.append(row_id)
    except FileNotFoundError:
        raise InputError("cohort file not found", file=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read cohort file: {exc}", file=str(path)) from None
    return ids


def cohort_sha256(path: Path) -> str:
    """The sha256 of a cohort file's bytes, read a block at a time."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        return _hash(fd)
    finally:
        os.close(fd)


def write_merged(target: Path, order: Iterable[tuple[RecordIndex, str]],
                 parsers: ParserLookup | None) -> None:
    """Write the lines of ``order`` (source, row id) to the new file ``target``
    (mode 0644, fsync'd), then check every source unchanged."""
    sources: dict[int, RecordIndex] = {}
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW
                     | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            os.fchmod(fd, 0o644)
            lookup = once_per_guard(parsers)
            with os.fdopen(fd, "wb", buffering=_READ, closefd=False) as out:
                for source, row_id in order:
                    sources[id(source)] = source
                    out.write(source.line(row_id, lookup))
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise output_error(target, exc) from None
    for source in sources.values():
        source.check_unchanged()
