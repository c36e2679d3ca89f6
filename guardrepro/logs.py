"""Logging, set up once per command: one stderr handler, levels by ``--verbose/--quiet``.

Input: a verbosity (``-1`` quiet, ``0`` default, ``1`` ``--verbose``, ``2`` or more
``-vv``). Output: the root logger's one guardrepro handler on stderr (WARNING by
default, INFO with ``-v``, DEBUG with ``-vv``, ERROR with ``--quiet``); the same level
handed to transformers and huggingface_hub through ``TRANSFORMERS_VERBOSITY`` and
``HF_HUB_VERBOSITY`` (read when they are imported, here or in a worker process,
which inherits the environment), and to transformers' own logger when it is
already imported (its handler then yields to ours).

``capture_stdout(name)`` turns a third-party library's ``print`` lines (mlx-lm's
``[INFO] ...``) into INFO records of logger ``name``: hidden by default, shown with
``--verbose``, kept in ``run.log``. ``run_log(path)`` adds, for its duration, a
file handler appending every INFO record to ``path`` (a resumed run continues the
same log).

``to_queue(queue, level)`` is for a worker process (``run --workers``): its records
(ours, third-party ones, captured print lines) go to ``queue`` instead of a handler
of its own, and the parent passes each one to ``handle``: its stderr at the
parent's level and, during a run, the run's ``run.log``. Each ``run.log`` line
names the process that logged it (``[pid N]``). ``to_buffer(level)`` does the
same for a Ray actor, whose records travel to the driver by value
(``as_entry`` dicts, replayed there by ``handle_entry``).

Invariants: calling ``setup`` again only changes the level (never a second
handler); nothing here touches stdout, which stays for each verb's result.
"""

from __future__ import annotations

import contextlib
import io
import logging
import logging.handlers
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from guardrepro.artifacts.nofollow import open_file
from guardrepro.textsafe import shown, shown_lines

LEVELS = {-1: logging.ERROR, 0: logging.WARNING, 1: logging.INFO}
HF_NAMES = {logging.ERROR: "error", logging.WARNING: "warning", logging.INFO: "info",
            logging.DEBUG: "debug"}
FORMAT = "%(asctime)s %(levelname)s %(name)s [pid %(process)d]: %(message)s"


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg,unused-ignore]
    """Writes to the current ``sys.stderr`` (click's test runner swaps it), with
    non-printable characters escaped."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)

    def format(self, record: logging.LogRecord) -> str:
        """The message through ``textsafe.shown`` (a log line may quote data: it
        stays one line), a traceback below it line by line."""
        escaped = logging.makeLogRecord(record.__dict__)
        escaped.msg, escaped.args = shown(record.getMessage()), None
        return shown_lines(super().format(escaped))


def _ours() -> logging.Handler | None:
    return next((h for h in logging.getLogger().handlers if isinstance(h, _StderrHandler)),
                None)


def setup(verbosity: int = 0) -> int:
    """Configure logging for this process; returns the stderr level."""
    level = LEVELS.get(verbosity, logging.DEBUG if verbosity > 1 else logging.ERROR)
    handler = _ours()
    if handler is None:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(handler)
    handler.setLevel(level)
    root = logging.getLogger()
    root.setLevel(min(level, logging.INFO))  # INFO still reaches run.log
    os.environ["TRANSFORMERS_VERBOSITY"] = HF_NAMES[level]
    os.environ["HF_HUB_VERBOSITY"] = HF_NAMES[level]
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity(level)
    adopt_libraries()
    return level


def adopt_libraries() -> None:
    """Send an imported transformers' and huggingface_hub's records through the
    root logger only: their own stderr handlers go, so a line (a hub download's
    retry) is printed once, not once by the library and once by ours. Called again
    by whoever imports huggingface_hub later (``artifacts.hub``)."""
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_default_handler()
        hf_logging.enable_propagation()
    if "huggingface_hub" in sys.modules:
        import huggingface_hub.utils.logging  # noqa: F401  (adds its handler when first imported)

        hub = logging.getLogger("huggingface_hub")
        for handler in [h for h in hub.handlers if type(h) is logging.StreamHandler]:
            hub.removeHandler(handler)  # huggingface_hub's default handler, added at import
        hub.propagate = True


class _QueueHandler(logging.handlers.QueueHandler):
    """Puts each prepared record (message formatted, no traceback object) on a
    ``multiprocessing`` queue, which has no ``put_nowait``."""

    def __init__(self, queue: Any) -> None:
        super().__init__(queue)
        self.target = queue

    def enqueue(self, record: logging.LogRecord) -> None:
        self.target.put(record)


def to_queue(queue: Any, level: int) -> None:
    """In a worker process: every record goes to ``queue`` (the handlers inherited
    through fork, stderr and run.log, go); ``level``: the parent's root level."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.addHandler(_QueueHandler(queue))
    root.setLevel(level)
    adopt_libraries()


def handle(record: logging.LogRecord) -> None:
    """In the parent: a worker's record to this process's handlers (stderr, run.log)."""
    logging.getLogger().handle(record)


def as_entry(record: logging.LogRecord) -> dict[str, Any]:
    """A record as plain data (message formatted, traceback as text): what a
    process whose results travel by value (a Ray actor) sends its parent."""
    exc_text = record.exc_text
    if exc_text is None and record.exc_info:
        exc_text = logging.Formatter().formatException(record.exc_info)
    return {"name": record.name, "levelno": record.levelno, "levelname": record.levelname,
            "msg": record.getMessage(), "created": record.created, "msecs": record.msecs,
            "process": record.process, "processName": record.processName,
            "exc_text": exc_text}


def handle_entry(entry: dict[str, Any]) -> None:
    """In the parent: an ``as_entry`` record to this process's handlers."""
    handle(logging.makeLogRecord(entry))


class BufferHandler(logging.Handler):
    """Keeps every record as an ``as_entry`` dict until ``take``."""

    def __init__(self) -> None:
        super().__init__()
        self.entries: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.entries.append(as_entry(record))
        except Exception:  # a record that cannot be formatted: logging's own report
            self.handleError(record)

    def take(self) -> list[dict[str, Any]]:
        entries, self.entries = self.entries, []
        return entries


def to_buffer(level: int) -> BufferHandler:
    """In a Ray actor: every record at ``level`` or above (the driver's root
    level) is also kept in the returned buffer, which the actor sends to the
    driver; a buffer from an earlier call in this process is replaced."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, BufferHandler)]:
        root.removeHandler(handler)
    buffer = BufferHandler()
    root.addHandler(buffer)
    root.setLevel(level)
    adopt_libraries()
    return buffer


class _LogWriter(io.TextIOBase):
    """A text stream whose complete lines become INFO records."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger, self.pending = logger, ""

    def write(self, text: str) -> int:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            if line.strip():
                self.logger.info(line.strip())
        return len(text)

    def flush(self) -> None:
        if self.pending.strip():
            self.logger.info(self.pending.strip())
        self.pending = ""


@contextlib.contextmanager
def capture_stdout(name: str) -> Iterator[None]:
    """Route ``print`` output inside the block to INFO records of logger ``name``."""
    writer = _LogWriter(logging.getLogger(name))
    try:
        with contextlib.redirect_stdout(writer):
            yield
    finally:
        writer.flush()


class _RunLogHandler(logging.FileHandler):
    """A run.log that stops quietly when its disk fills up: the run's own writes
    report that, with the path, and a log line is never worth a traceback. It is
    opened without following a symlink below ``trusted`` (``artifacts.nofollow``)."""

    def __init__(self, path: Path, trusted: Path | None) -> None:
        self.trusted = trusted
        super().__init__(path, encoding="utf-8")

    def _open(self) -> Any:
        fd = open_file(Path(self.baseFilename), os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                       trusted=self.trusted)
        return os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)

    def handleError(self, record: logging.LogRecord) -> None:
        logging.getLogger().removeHandler(self)
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            super().close()


@contextlib.contextmanager
def run_log(path: Path, *, trusted: Path | None = None) -> Iterator[Path]:
    """Append every INFO record to ``path`` (a run's ``run.log``) while the block
    runs; a symlink at it or at a directory below ``trusted`` is refused."""
    handler = _RunLogHandler(path, trusted)
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter(FORMAT))
    root = logging.getLogger()
    before = root.level
    root.setLevel(min(before, logging.INFO) if before else logging.INFO)
    root.addHandler(handler)
    try:
        yield path
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM / SIGHUP (errors.Interrupted)
        logging.getLogger("guardrepro.run").info(
            "interrupted by %s: the records written so far are kept; rerunning the same "
            "command resumes", getattr(exc, "name", "SIGINT"))
        raise
    finally:
        root.removeHandler(handler)
        root.setLevel(before)
        handler.close()
