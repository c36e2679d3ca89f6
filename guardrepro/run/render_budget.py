"""A time budget for rendering a chat template that no pin vouches for.

Input: the seconds allowed (``GUARDREPRO_TEMPLATE_BUDGET_S``, default 10) and a
name for the template. Output: a context manager; rendering that outlasts the
budget raises ``PromptError`` naming the template and the budget.

Why: a checkpoint's chat template is a Jinja program. Jinja's sandbox stops
attribute tricks but not loops, so ``{% for i in range(100000) %}{% for j in
range(100000) %}`` runs for hours. An unpinned checkpoint directory is untrusted
input and renders under this budget; a pinned checkpoint's template was
verified by its sha256 (the lock pins ``tokenizer_config.json``) and is trusted.

The budget is a ``SIGALRM`` timer, so it applies on the main thread (where the
CLI renders); elsewhere it is not armed. Jinja templates compile to Python, so
the alarm interrupts a runaway loop between bytecodes.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from guardrepro.artifacts.fetch_policy import env_number
from guardrepro.errors import PromptError

BUDGET_ENV = "GUARDREPRO_TEMPLATE_BUDGET_S"
DEFAULT_BUDGET_S = 10.0


class _OverBudget(BaseException):
    """Raised by the alarm; a BaseException so template code cannot swallow it."""


def budget_s() -> float:
    return env_number(BUDGET_ENV, DEFAULT_BUDGET_S, positive=True)


@contextlib.contextmanager
def render_budget(what: str, seconds: float | None = None) -> Iterator[None]:
    """Run the body under a wall-clock budget (main thread only)."""
    limit = budget_s() if seconds is None else seconds
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise _OverBudget()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    except _OverBudget:
        raise PromptError(
            f"{what}: rendering took more than the {limit:g} s budget for a chat template no"
            f" pin vouches for (set {BUDGET_ENV} to allow more, or pin the checkpoint with a"
            " lock)"
        ) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
