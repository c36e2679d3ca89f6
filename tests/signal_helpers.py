"""A ``guardrepro run`` process stopped by a signal in the tests, and its workers waited for.

``stop_and_reap`` is the part the Ctrl-C trials (tests/test_run_interrupt.py)
and the SIGTERM/SIGHUP trials (tests/test_faults_signals.py) share: signal,
bounded wait for the exit, bounded wait for every worker to go.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable

import pytest


def stop_and_reap(proc: subprocess.Popen[str], send: Callable[[], None], *, within_s: float,
                  settle_s: float, alive: Callable[[], object], label: str) -> tuple[float, str]:
    """Call ``send`` (it signals ``proc``), wait up to ``within_s`` for ``proc`` to
    exit (after that: SIGKILL to its group and a failure naming ``label``), then
    up to ``settle_s`` for ``alive()`` to turn falsy (else a failure: a worker
    outlived the run). Returns the seconds from the signal to the exit, and stderr."""
    send()
    sent = time.monotonic()
    try:
        _, err = proc.communicate(timeout=within_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"{label}: still running {within_s} s after the signal")
    took = time.monotonic() - sent
    deadline = time.monotonic() + settle_s
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(), f"{label}: a worker outlived the run"
    return took, err
