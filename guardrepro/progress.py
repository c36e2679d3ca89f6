"""Progress for long work: a bar on a terminal, a line now and then elsewhere.

Input: a total, a label and a unit. Output: an object with ``update(n)`` and
``close()`` (also a context manager) drawing on stderr.

Invariants: on a terminal (stderr is a TTY) it is a tqdm bar; on anything else
(a log file, CI, a pipe) no bar frame is written: a plain line
``<label>: <done>/<total> <unit>s (<pct>%), <elapsed>s`` every ``every_rows``
(default a twentieth of the total) or every ``every_s`` seconds (default 30,
``$GUARDREPRO_PROGRESS_EVERY_S``), whichever comes first, and one at the end.
Unit ``"B"`` counts bytes with a decimal prefix (``verify x: 3.1/13.8 MB (22%), 4s``);
a bar without a known total (``total=None``) counts only (``intervals: 40
intervals, 2s``), a line every ``every_s`` seconds and one at the end.
Each line also goes to the ``guardrepro.progress`` logger, so a run's
``run.log`` keeps them. ``enabled=False`` writes nothing at all.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sized
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

    def __init__(self, total: int | None, desc: str, unit: str, *, initial: int = 0,
                 every_rows: int | None = None, every_s: float | None = None) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.every_rows = every_rows or (max(1, total // 20) if total else None)
        env = os.environ.get(EVERY_S_ENV)
        self.every_s = every_s if every_s is not None else float(env) if env else 30.0
        self.n = self._last_n = initial
        self.started = self._last_t = time.monotonic()
        self._closed = False

    def _amounts(self) -> str:
        if self.unit == "B":
            return _bytes(self.n, self.total)
        if self.total is None:
            return f"{self.n} {self.unit}s"
        return f"{self.n}/{self.total} {self.unit}s"

    def _line(self) -> None:
        pct = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        text = f"{self.desc}: {self._amounts()}{pct}, {time.monotonic() - self.started:.0f}s"
        print(text, file=sys.stderr, flush=True)
        log.info(text)
        self._last_n, self._last_t = self.n, time.monotonic()

    def update(self, n: int = 1) -> None:
        self.n += n
        if ((self.every_rows is not None and self.n - self._last_n >= self.every_rows)
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


PREFIXES = ((10**12, "T"), (10**9, "G"), (10**6, "M"), (10**3, "k"))


def _bytes(n: int, total: int | None) -> str:
    """``3.1/13.8 MB``: both amounts with the prefix of the larger one."""
    top = max(n, total or 0)
    scale, prefix = next(((s, p) for s, p in PREFIXES if top >= s), (1, ""))
    shown = [f"{v / scale:.1f}" if scale > 1 else str(v) for v in (n, total or 0)]
    done = shown[0] if total is None else "/".join(shown)
    return f"{done} {prefix}B"


def progress_bar(total: int | None, desc: str, unit: str, *, enabled: bool, leave: bool = True,
                 initial: int = 0) -> Any:
    """A tqdm bar on a terminal, ``LineProgress`` elsewhere, a silent bar if not enabled.
    Unit ``"B"``: bytes, shown with a decimal prefix; ``total=None``: a count only."""
    from tqdm import tqdm

    if enabled and not sys.stderr.isatty():
        return LineProgress(total, desc, unit, initial=initial)
    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled, leave=leave,
                initial=initial, unit_scale=unit == "B", file=sys.stderr)


def progress_iter(items: Iterable[T], desc: str, unit: str, *, enabled: bool,
                  leave: bool = True) -> Iterator[T]:
    """``for item in progress_iter(items, ...)``: ``progress_bar`` over ``items`` (its
    total is ``len(items)`` when they have one)."""
    total = len(items) if isinstance(items, Sized) else None
    bar = progress_bar(total, desc, unit, enabled=enabled, leave=leave)
    try:
        for item in items:
            yield item
            bar.update(1)
    finally:
        bar.close()
