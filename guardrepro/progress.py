"""Progress for long work: a bar on a terminal, a line now and then elsewhere.

Input: a total, a label and a unit. Output: an object with ``update(n)`` and
``close()`` (also a context manager) drawing on stderr.

Invariants: on a terminal (stderr is a TTY) it is a tqdm bar; on anything else
(a log file, CI, a pipe) no bar frame is written: a plain line
``<label>: <done>/<total> <unit>s (<pct>%), <elapsed>s`` every ``every_rows``
(default a twentieth of the total) or every ``every_s`` seconds (default 30,
``$GUARDREPRO_PROGRESS_EVERY_S``), whichever comes first, and one at the end.
Each line also goes to the ``guardrepro.progress`` logger, so a run's
``run.log`` keeps them. ``enabled=False`` writes nothing at all.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

EVERY_S_ENV = "GUARDREPRO_PROGRESS_EVERY_S"
log = logging.getLogger("guardrepro.progress")


class Progress(Protocol):
    def update(self, n: int = 1) -> Any: ...

    def close(self) -> None: ...


class LineProgress:
    """Periodic one-line progress for a non-terminal stderr."""

    def __init__(self, total: int, desc: str, unit: str, *, every_rows: int | None = None,
                 every_s: float | None = None) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.every_rows = every_rows or max(1, total // 20)
        env = os.environ.get(EVERY_S_ENV)
        self.every_s = every_s if every_s is not None else float(env) if env else 30.0
        self.n = 0
        self.started = self._last_t = time.monotonic()
        self._last_n = 0
        self._closed = False

    def _line(self) -> None:
        pct = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        text = (f"{self.desc}: {self.n}/{self.total} {self.unit}s{pct},"
                f" {time.monotonic() - self.started:.0f}s")
        print(text, file=sys.stderr, flush=True)
        log.info(text)
        self._last_n, self._last_t = self.n, time.monotonic()

    def update(self, n: int = 1) -> None:
        self.n += n
        if (self.n - self._last_n >= self.every_rows
                or time.monotonic() - self._last_t >= self.every_s):
            self._line()

    def close(self) -> None:
        if not self._closed and self.n != self._last_n:
            self._line()
        self._closed = True

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def progress_bar(total: int, desc: str, unit: str, *, enabled: bool) -> Any:
    """A tqdm bar on a terminal, ``LineProgress`` elsewhere, a silent bar if not enabled."""
    from tqdm import tqdm

    if enabled and not sys.stderr.isatty():
        return LineProgress(total, desc, unit)
    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled)


def progress_iter(items: Sequence[T], desc: str, unit: str, *, enabled: bool) -> Iterator[T]:
    """``for item in progress_iter(items, ...)``: ``progress_bar`` over a sequence."""
    bar = progress_bar(len(items), desc, unit, enabled=enabled)
    try:
        for item in items:
            yield item
            bar.update(1)
    finally:
        bar.close()
