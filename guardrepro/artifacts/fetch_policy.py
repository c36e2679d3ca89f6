"""How hard one download tries: attempts, backoff, stall timeout, per-file
deadline and minimum throughput, with defaults overridable from the environment.

Input: the environment (``GUARDREPRO_FETCH_*``). Output: a frozen RetryPolicy.
Invariant: every value is a finite number in range; anything else (NaN,
``inf``, a negative backoff, a zero deadline, ``abc``) is an InputError (exit 2)
naming the variable, before any request is made.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from guardrepro.errors import InputError

RETRIES_ENV = "GUARDREPRO_FETCH_RETRIES"
BACKOFF_ENV = "GUARDREPRO_FETCH_BACKOFF_S"
TIMEOUT_ENV = "GUARDREPRO_FETCH_TIMEOUT_S"
DEADLINE_ENV = "GUARDREPRO_FETCH_DEADLINE_S"
MIN_RATE_ENV = "GUARDREPRO_FETCH_MIN_RATE_BPS"
RATE_WINDOW_ENV = "GUARDREPRO_FETCH_RATE_WINDOW_S"


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try: attempts in total, first backoff (doubles), socket timeout
    (no byte for that long is a stall), an overall deadline per file, and a minimum
    throughput averaged over a window."""

    attempts: int = 5
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    timeout_s: float = 60.0
    deadline_s: float = 12 * 3600.0
    min_rate_bps: float = 4096.0
    rate_window_s: float = 60.0

    @classmethod
    def from_env(cls) -> RetryPolicy:
        """Defaults overridden by GUARDREPRO_FETCH_RETRIES / _BACKOFF_S / _TIMEOUT_S /
        _DEADLINE_S / _MIN_RATE_BPS / _RATE_WINDOW_S. A value that is not a finite
        number, or is out of range (attempts under 1, a negative backoff or rate, a
        timeout, deadline or window that is not positive), is an InputError naming
        the variable."""
        base = cls()
        return cls(
            attempts=int(env_number(RETRIES_ENV, base.attempts, integer=True, low=1)),
            backoff_s=env_number(BACKOFF_ENV, base.backoff_s, low=0),
            timeout_s=env_number(TIMEOUT_ENV, base.timeout_s, positive=True),
            deadline_s=env_number(DEADLINE_ENV, base.deadline_s, positive=True),
            min_rate_bps=env_number(MIN_RATE_ENV, base.min_rate_bps, low=0),
            rate_window_s=env_number(RATE_WINDOW_ENV, base.rate_window_s, positive=True),
        )

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (0-based)."""
        return min(self.max_backoff_s, self.backoff_s * (2**attempt))


def env_number(
    name: str, default: float, *, integer: bool = False, low: float = 0, positive: bool = False
) -> float:
    """The environment's value of ``name`` (``default`` when unset), validated."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    kind = "a whole number" if integer else "a number"
    try:
        value = float(int(raw.strip())) if integer else float(raw)
    except ValueError:
        raise InputError(f"environment variable {name}={raw!r} is not {kind}") from None
    if not math.isfinite(value):
        raise InputError(f"environment variable {name}={raw!r} must be a finite number")
    if positive and value <= 0:
        raise InputError(f"environment variable {name}={raw!r} must be greater than 0")
    if value < low:
        raise InputError(f"environment variable {name}={raw!r} must be at least {low:g}")
    return value
