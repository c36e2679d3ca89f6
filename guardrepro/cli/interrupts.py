"""SIGTERM and SIGHUP end a verb the way Ctrl-C does.

Input: the signals a process manager sends (``timeout``, systemd, Slurm and
``docker stop`` send SIGTERM; a closed terminal sends SIGHUP).
Output: while ``terminations_interrupt`` is active, either signal raises
``errors.Interrupted`` in the main thread, which unwinds like SIGINT's
KeyboardInterrupt (``run --workers`` terminates its workers, the Ray driver
shuts its local Ray down, the record writer releases its lock);
``interruption`` gives the exit code (128 + the signal: 130, 143, 129) and the
message, which for a resumable verb says that rerunning it resumes.

Invariants: one signal starts the unwinding; a second one meanwhile is
ignored, so that the clean-up (bounded: ``run.workers.STOP_TIMEOUT_S``) is not
cut short; the previous handlers are back when the block ends.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator, Sequence
from types import FrameType

from guardrepro.errors import Interrupted

TERMINATING = (signal.SIGTERM, signal.SIGHUP)
RESUMABLE = ("run", "sweep", "demo")


@contextlib.contextmanager
def terminations_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``Interrupted`` while the block runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        for number in TERMINATING:  # the clean-up is not interrupted again
            signal.signal(number, signal.SIG_IGN)
        raise Interrupted(signum)

    previous = {number: signal.signal(number, handler) for number in TERMINATING}
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


def interruption(exc: BaseException) -> int | None:
    """The signal behind ``exc`` (SIGINT for a plain KeyboardInterrupt, looked
    for along its cause and context chain: libraries wrap it), or None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, Interrupted):
            return current.signum
        if isinstance(current, KeyboardInterrupt):
            return int(signal.SIGINT)
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def message(signum: int, argv: Sequence[str]) -> str:
    """What the CLI prints for an interruption of ``guardrepro ARGV``."""
    name = signal.Signals(signum).name
    verb = next((a for a in argv if not a.startswith("-")), "")
    if verb in RESUMABLE:
        return (f"Aborted ({name}): the records written so far are kept; rerun the same "
                "command to resume.")
    return "Aborted." if signum == signal.SIGINT else f"Aborted ({name})."
