"""One way for tests to wait on something another process does: a predicate, a deadline,
and a message that says what never happened.

Cross-process conditions (a file written, a counter reached) have no event to block
on, so the predicate is checked on a short period; the deadline, not the period, is
what the test relies on.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

_never = threading.Event()  # never set: waiting on it is a pause that signals cannot cut short


def wait_until[T](
    condition: Callable[[], T],
    timeout_s: float,
    what: str,
    period_s: float = 0.02,
    on_wait: Callable[[], None] | None = None,
) -> T:
    """The first truthy value of ``condition()``; AssertionError naming ``what`` at the deadline.

    ``on_wait`` runs before every re-check (to drive a poll loop, or to fail early when
    the process being waited on has died).
    """
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        if on_wait is not None:
            on_wait()
        _never.wait(period_s)
    return value


def pid_alive(pid: int) -> bool:
    """Whether a process with this id still exists (signal 0 checks without sending anything)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
