"""A run directory's append-only ``records.jsonl``: read and written.

Input: ``schema.Record`` values produced by the pipeline, one per cohort row.
Output: ``records.jsonl`` holding one ``Record.to_dict()`` JSON object per line
(the manifest beside it: ``rundir.manifest``).

Invariants:

- Appends are whole: each record is serialised to one line that ends in
  ``\\n``, written with a single ``os.write`` on an ``O_APPEND`` descriptor
  before ``append`` returns, and fsync'd in batches (``rundir.record_sync``: at
  most 1,000 rows or 1 s later, and at close). A record is complete exactly
  when its line ends in a newline.
- One writer at a time: ``RecordWriter`` holds an exclusive, non-blocking
  ``flock`` on ``records.jsonl.lock`` for its whole life; a second writer on
  the same directory (another process, or another writer in this process)
  fails at once with a clear message. The OS releases the lock when the holder
  dies, even by SIGKILL.
- A torn final line (a machine that stopped before fsync) was never a complete
  record: a writer opening the directory truncates it, with a warning, and the
  row is generated again. ``read_records`` refuses such a file instead.
- Row ids are unique within a run; a duplicate is an error, never skipped.
"""

from __future__ import annotations

import datetime as _dt
import errno
import json
import os
from collections.abc import Sequence
from pathlib import Path

from guardrepro.artifacts.nofollow import (
    describe_os_error,
    open_dir,
    open_in,
    output_error,
    read_fd,
)
from guardrepro.artifacts.store import atomic_write_bytes
from guardrepro.errors import InputError, OutputError
from guardrepro.limits import at_line, load_json
from guardrepro.rundir.leftovers import missing_dirs
from guardrepro.rundir.record_checks import (
    ParserLookup,
    check_record,
    duplicate_row,
    once_per_guard,
    torn_last_line,
)
from guardrepro.rundir.record_index import (  # noqa: F401 (TornRecordWarning re-exported)
    RecordIndex,
    TornRecordWarning,
    count_lines,
    index_lines,
    repair_tail,
)
from guardrepro.rundir.record_sync import RecordSync, SyncPolicy
from guardrepro.schema import Provenance, Record

RECORDS_FILE = "records.jsonl"
LOCK_FILE = "records.jsonl.lock"


def utc_now() -> str:
    """An ISO-8601 UTC timestamp with second precision."""
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (``artifacts.store.atomic_write_bytes``)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def record_line(record: Record) -> str:
    """The one serialisation of a record in ``records.jsonl``: sorted keys, UTF-8, newline."""
    return json.dumps(record.to_dict(), ensure_ascii=False, sort_keys=True) + "\n"


def parse_record_line(line: bytes, *, file: str, row: int, parsers: ParserLookup | None = None
                ) -> Record:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"invalid JSON record: {exc}", file=file, row=row,
                         line=row + 1) from None
    data = load_json(text, file=file, row=row, line=row + 1, what="JSON record")
    try:
        record = Record.from_dict(data, file=file, row=row)
        check_record(record, file=file, row=row, parsers=parsers)
    except InputError as exc:
        raise at_line(exc, row) from None
    return record


def parse_records(data: bytes, *, file: str, parsers: ParserLookup | None = None
                  ) -> list[Record]:
    """``read_records`` of a records file's bytes ``data`` (read by a caller who
    hashes the same bytes); ``file`` is named in errors."""
    if data and not data.endswith(b"\n"):
        raise torn_last_line(file=file, row=data.count(b"\n"))
    return _parse_records(data, file=file, parsers=parsers)


def _parse_records(data: bytes, *, file: str, parsers: ParserLookup | None = None
                   ) -> list[Record]:
    records: list[Record] = []
    seen: dict[str, int] = {}
    parsers = once_per_guard(parsers)
    shared: Provenance | None = None
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for index, line in enumerate(lines):
        record = parse_record_line(line, file=file, row=index, parsers=parsers)
        if record.row_id in seen:
            raise duplicate_row(record.row_id, seen[record.row_id], file=file, row=index)
        seen[record.row_id] = index
        if record.provenance == shared:  # one object for a run's equal provenances
            object.__setattr__(record, "provenance", shared)  # (a frozen field, same value)
        shared = record.provenance
        records.append(record)
    return records


def records_path(run: str | Path) -> Path:
    """The records file of a run given as a run directory or a records file (the one
    place a run argument becomes its ``records.jsonl``); an InputError without one."""
    path = Path(run)
    if path.is_dir():
        path = path / RECORDS_FILE
    if not path.is_file():
        raise InputError("no records.jsonl here (expected a run directory or a records file)",
                         file=str(path))
    return path


def read_records(path: str | Path, *, parsers: ParserLookup | None = None) -> list[Record]:
    """Read a records file strictly: every line a complete, valid record; unique row ids.

    ``path`` is ``records.jsonl`` or a run directory. A torn final line is an
    error here (resume the run to repair it). ``parsers`` (``guards.registry.record_parser``):
    refuse a score its output text does not parse to (``rundir.record_checks.check_record``).
    """
    path = Path(path)
    if path.is_dir():
        path = path / RECORDS_FILE
    return parse_records(path.read_bytes(), file=str(path), parsers=parsers)


class RecordWriter:
    """Exclusive, append-only writer for one run directory (creates it if needed).

    On open it takes the directory's lock, repairs a torn final line (warning
    ``TornRecordWarning``) and reads the records already present, a line at a
    time, each checked as ``read_records`` checks it, into ``self.records``
    (a ``rundir.record_index.RecordIndex``: by row id, the line's place, input
    hash and status; ``read`` gives a whole record back). Use as a context
    manager or call ``close``.
    """

    _sync: RecordSync | None

    def __init__(self, run_dir: str | Path, *, refused_leaves: tuple[str, ...] | None = None,
                 parsers: ParserLookup | None = None, trusted: Path | None = None) -> None:
        self._policy, self._sync = SyncPolicy.from_env(), None  # bad settings refused first
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / RECORDS_FILE
        # What this writer creates, so a run refused before its first record can
        # remove exactly that: with ``refused_leaves`` (names of other run files the
        # caller may write, e.g. the manifest) an exception leaving the ``with`` block
        # while the run holds no record calls ``discard_created``.
        self._discard_on_error = refused_leaves is not None
        self._new_dirs = missing_dirs(self.run_dir)
        self._new_files = [p for p in (self.path, self.run_dir / LOCK_FILE,
                                       *(self.run_dir / n for n in refused_leaves or ()))
                           if not os.path.lexists(p)]
        self._lock_fd: int | None = None
        self._fd: int | None = None
        self.records = RecordIndex()  # what is kept of each record (rundir.record_index)
        # every file of the run is opened relative to this descriptor, without
        # following a symlink (``trusted``: see ``artifacts.nofollow``)
        self.dir_fd: int | None = open_dir(self.run_dir, trusted=trusted, create=True)
        try:
            self._lock()
            self._fd = open_in(self.dir_fd, self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
            # a torn final line (TornRecordWarning) is cut off, reading from the end
            self._end, self.truncated_bytes = repair_tail(self._fd, self.path)
            checked = once_per_guard(parsers)
            self.records = index_lines(
                self._fd, lambda line, row: parse_record_line(line, file=str(self.path), row=row,
                                                        parsers=checked),
                file=str(self.path), end=self._end)
            self._sync = RecordSync(self._fd, self._policy, self.path)
        except BaseException as exc:
            where = self.path if self._lock_fd is not None else self.run_dir / LOCK_FILE
            if self._discard_on_error and self._lock_fd is not None:
                self.discard_created()  # e.g. a symlink planted at records.jsonl
            self.close()
            if isinstance(exc, OSError) and not isinstance(exc, OutputError):
                raise output_error(where, exc) from None
            raise

    def discard_created(self) -> None:
        """Close, and remove what did not exist when this writer opened: the records
        file, its lock file, the ``refused_leaves`` files and the directories it made.
        Only for a run that holds no record: with any record, nothing is removed.
        Files that existed before are never touched."""
        if self.records or (self.path.exists() and self.path.stat().st_size):
            self.close()
            return
        for path in self._new_files:  # the lock still held: no other run gets in
            path.unlink(missing_ok=True)
        self.close()
        for directory in self._new_dirs:  # deepest first; only while empty
            try:
                directory.rmdir()
            except OSError:
                break

    def _lock(self) -> None:
        import fcntl

        lock_path = self.run_dir / LOCK_FILE
        assert self.dir_fd is not None
        fd = open_in(self.dir_fd, lock_path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise InputError(
                    "another guardrepro run is writing to this run directory (its lock is "
                    "held); wait for it to finish or choose another --out",
                    file=str(lock_path),
                ) from exc
            raise
        self._lock_fd = fd

    def read(self, row_id: str) -> Record:
        """The whole record of ``row_id``, read back from its line."""
        if self._fd is None:
            raise InputError("record writer is closed", file=str(self.path))
        offset, length = self.records.location(row_id)
        line = os.pread(self._fd, length, offset)
        return parse_record_line(line[:-1], file=str(self.path), row=count_lines(self._fd, offset))

    def append(self, record: Record) -> None:
        """Append one record (fsync'd as ``rundir.record_sync`` says); its row id is new."""
        if self._fd is None or self._sync is None:
            raise InputError("record writer is closed", file=str(self.path))
        if record.row_id in self.records:
            raise InputError(
                f"row {record.row_id!r} already has a record in this run",
                file=str(self.path),
                field="row_id",
            )
        line = record_line(record).encode("utf-8")
        try:
            written = os.write(self._fd, line)
            while written < len(line):  # short writes are rare on local files; finish it
                written += os.write(self._fd, line[written:])
        except OSError as exc:
            raise OutputError(
                f"cannot append the record of row {record.row_id!r} to {self.path}:"
                f" {describe_os_error(exc)}; the records before it are intact, and a torn"
                " final line is removed when the run resumes"
            ) from None
        self.records.add(record, self._end, len(line))
        self._end += len(line)
        self._sync.wrote()  # in the file now; fsync'd by the policy (OutputError if it fails)

    def rewrite_in_order(self, row_ids: Sequence[str]) -> bool:
        """Atomically rewrite the records file with its lines (bytes unchanged)
        in the order of ``row_ids`` (ids without a record are skipped); every
        record must be named. Returns whether the file changed."""
        if self._fd is None or self._sync is None:
            raise InputError("record writer is closed", file=str(self.path))
        lines = read_fd(self._fd).splitlines(keepends=True)
        # Lines move as bytes; each was read into a Record when the writer opened
        # or was written by ``append``, so only its row id is looked up here.
        by_id = {json.loads(line)["row_id"]: line for line in lines}
        unnamed = sorted(set(by_id) - set(row_ids))
        if unnamed:
            raise InputError(f"records of rows not in the order given: {unnamed[:5]}",
                             file=str(self.path))
        ordered = [by_id[i] for i in row_ids if i in by_id]
        if ordered == lines:
            return False
        offset = 0
        for row_id, line in ((i, by_id[i]) for i in row_ids if i in by_id):
            self.records.move(row_id, offset)
            offset += len(line)
        self._sync.close()
        os.close(self._fd)
        self._fd = None
        atomic_write_bytes(self.path, b"".join(ordered))
        assert self.dir_fd is not None
        self._fd = open_in(self.dir_fd, self.path, os.O_RDWR | os.O_APPEND)
        self._sync = RecordSync(self._fd, self._policy, self.path)
        return True

    def close(self) -> None:
        sync, self._sync = self._sync, None
        try:
            if sync is not None:
                sync.close()  # the pending records fsync'd
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            if self._lock_fd is not None:
                os.close(self._lock_fd)  # closing the descriptor releases the flock
                self._lock_fd = None
            if self.dir_fd is not None:
                os.close(self.dir_fd)
                self.dir_fd = None

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None and self._discard_on_error:
            self.discard_created()
        self.close()
