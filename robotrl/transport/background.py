"""What every transport I/O thread shares: counters read as one snapshot, rejections counted
and logged sparingly, and low priority."""

from __future__ import annotations

import contextlib
import logging
import os
import threading

from robotrl.wire.codec import WireError

log = logging.getLogger(__name__)


class Counters:
    """Thread-safe named counters (the I/O thread adds, anyone reads a snapshot)."""

    def __init__(self, *names: str) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(names, 0)

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._values[name] = self._values.get(name, 0) + n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)


def lower_priority(niceness: int = 10) -> None:
    """Make the calling thread yield the CPU to the actor's control loop.

    Linux, and no privileges needed to lower one's own priority. Moving batches and
    checking 200 MB of weights is background work: on a small robot PC it must never
    delay a control tick. Threads (and libzmq's I/O threads) started by this thread
    inherit the niceness.
    """
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), niceness)


def log_rejection(counts: Counters, error: WireError, who: str) -> None:
    """Count a rejected message; log the first few of each reason, then every 100th."""
    counts.add(f"rejected_{error.reason}")
    n = counts.snapshot()[f"rejected_{error.reason}"]
    if n <= 5 or n % 100 == 0:
        log.warning("%s: rejected message (%s, #%d): %s", who, error.reason, n, error)
