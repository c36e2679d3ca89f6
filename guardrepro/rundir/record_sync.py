"""When ``records.jsonl`` is fsync'd: batched, with a bound on rows and seconds.

Input: the records file's descriptor (``rundir.records.RecordWriter`` opens it,
``O_APPEND``) and a ``SyncPolicy``: at most ``rows`` records
(``GUARDREPRO_RECORDS_SYNC_ROWS``, default 1,000) and at most ``seconds``
(``GUARDREPRO_RECORDS_SYNC_S``, default 1) between an append and the fsync
that makes it durable. ``GUARDREPRO_RECORDS_SYNC_ROWS=1`` fsyncs every record
before ``append`` returns, as the writer did before batching.

The guarantee (docs/FAULTS.md, "Records: batched fsync"):

- Every record reaches the kernel whole before ``append`` returns: one
  ``os.write`` of one line on an ``O_APPEND`` descriptor. A process that dies
  in any way (an exception, SIGINT, SIGTERM, SIGKILL, the OOM killer) loses no
  appended record: the bytes are the kernel's, not the process's. Batching
  changes nothing here.
- What batching defers is only durability against the *machine* stopping (a
  kernel crash, a power loss): a record is fsync'd once ``rows`` records are
  pending, once ``seconds`` have passed since the oldest pending one (a
  background thread syncs a run that stalls after appending), and when the
  writer closes (a finished run, and the ``finally`` of an interrupted one:
  SIGINT, or any signal the CLI turns into an exception). A machine that stops
  loses at most the unsynced tail: fewer than ``rows`` records, appended in the
  last ``seconds``. The file keeps a prefix of its lines, possibly ending in a
  torn line; the next writer on the directory cuts that line (with
  ``TornRecordWarning``) and the resumed run generates the lost rows again.
- An fsync that fails (EIO, a full disk) is never dropped: the append that
  triggered it raises, or, for the background thread, the next append or the
  close does, naming the file.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from guardrepro.artifacts.fetch_policy import env_number
from guardrepro.artifacts.nofollow import describe_os_error
from guardrepro.errors import OutputError

ROWS_ENV = "GUARDREPRO_RECORDS_SYNC_ROWS"
SECONDS_ENV = "GUARDREPRO_RECORDS_SYNC_S"
DEFAULT_ROWS = 1000
DEFAULT_SECONDS = 1.0


@dataclass(frozen=True)
class SyncPolicy:
    """At most ``rows`` records and ``seconds`` between an append and its fsync."""

    rows: int = DEFAULT_ROWS
    seconds: float = DEFAULT_SECONDS

    @classmethod
    def from_env(cls) -> SyncPolicy:
        """The policy the environment sets (an invalid value: ``InputError`` naming it)."""
        rows = env_number(ROWS_ENV, DEFAULT_ROWS, integer=True, low=1)
        seconds = env_number(SECONDS_ENV, DEFAULT_SECONDS, positive=True)
        return cls(int(rows), seconds)


class RecordSync:
    """The fsync schedule of one open records file (see the module docstring).

    ``wrote()`` after each whole line; ``sync()`` forces one; ``close()``
    stops the background thread and syncs what is pending. The caller closes
    the descriptor after ``close()``. A failed fsync is an ``OutputError``
    naming ``path``."""

    def __init__(self, fd: int, policy: SyncPolicy, path: Path) -> None:
        self._fd = fd
        self.path = path
        self.policy = policy
        self._lock = threading.Lock()
        self._pending = 0
        self._oldest = 0.0  # monotonic time of the oldest unsynced append
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: OutputError | None = None
        self.syncs = 0

    def wrote(self) -> None:
        """One more line was written; fsync now when the policy says so (a failed
        fsync, this one or an earlier background one, raises ``OutputError``)."""
        self._raise_background_error()
        with self._lock:
            if self._pending == 0:
                self._oldest = time.monotonic()
            self._pending += 1
            due = (self._pending >= self.policy.rows
                   or time.monotonic() - self._oldest >= self.policy.seconds)
        if due:
            self.sync()
        elif self._thread is None:
            self._thread = threading.Thread(target=self._background, daemon=True,
                                            name="records-fsync")
            self._thread.start()

    def sync(self) -> None:
        """fsync the pending lines now (nothing to do when none are pending)."""
        with self._lock:
            if self._pending == 0:
                return
            try:
                os.fsync(self._fd)
            except OSError as exc:
                raise self._failed(exc) from None
            self._pending = 0
            self.syncs += 1

    def _failed(self, exc: OSError) -> OutputError:
        return OutputError(
            f"cannot fsync {self.path}: {describe_os_error(exc)}; the {self._pending} record(s)"
            " written since the last fsync are in the file but a machine crash could lose"
            " them (a rerun resumes)")

    def _background(self) -> None:
        while True:
            with self._lock:
                wait = (self.policy.seconds if self._pending == 0
                        else self._oldest + self.policy.seconds - time.monotonic())
            if self._stop.wait(max(wait, 0.0)):
                return
            with self._lock:
                due = (self._pending > 0
                       and time.monotonic() - self._oldest >= self.policy.seconds)
            if due:
                try:
                    self.sync()
                except OutputError as exc:
                    self._error = exc
                    return

    def _raise_background_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def close(self) -> None:
        """Stop the background thread and fsync what is pending."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._raise_background_error()
        self.sync()
