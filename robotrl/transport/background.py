"""What every transport I/O thread shares: counters read as one snapshot, rejections counted
and logged sparingly, and low priority."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable

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


def at_lowest_priority(work: Callable[[], object], name: str) -> threading.Thread:
    """Run ``work`` on a new daemon thread of the lowest priority (niceness 19), started: for
    freeing or making hundreds of MB (unmapping the weights an update replaced, unlinking or
    allocating a segment), tens of ms nothing waiting on the result should pay."""

    def run() -> None:
        lower_priority(19)
        work()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


class LogBudget:
    """At most ``lines_per_s`` log lines per second for each kind of line (a token bucket).

    Kinds are a fixed few (a rejection reason, "actor connected"), never a peer's
    identity, so a peer that changes identity on every message cannot widen the budget.
    """

    def __init__(self, lines_per_s: float = 2.0, burst: int = 5, clock: Callable[[], float] = time.monotonic):
        self._rate = lines_per_s
        self._burst = float(burst)
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens: dict[str, tuple[float, float]] = {}  # kind -> (tokens, when)

    def allow(self, kind: str) -> bool:
        """True when a line of ``kind`` may be written now (and spends it)."""
        now = self._clock()
        with self._lock:
            tokens, then = self._tokens.get(kind, (self._burst, now))
            tokens = min(self._burst, tokens + (now - then) * self._rate)
            allowed = tokens >= 1.0
            self._tokens[kind] = (tokens - 1.0 if allowed else tokens, now)
            return allowed


PEER_LOG = LogBudget()
"""The budget every link's lines about its peers share: 5 at once, then 2 per second per kind."""


def log_rejection(counts: Counters, error: WireError, who: str, budget: LogBudget = PEER_LOG) -> None:
    """Count a rejected message; log it within ``budget`` (the count says how many there were)."""
    counts.add(f"rejected_{error.reason}")
    n = counts.snapshot()[f"rejected_{error.reason}"]
    if budget.allow(f"{who}: rejected {error.reason}"):
        log.warning("%s: rejected message (%s, #%d): %s", who, error.reason, n, error)
