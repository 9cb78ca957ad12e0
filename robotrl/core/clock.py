"""Clocks, injected wherever timing matters.

Real runs use :class:`MonotonicClock`; tests and virtual-time simulation use
:class:`VirtualClock`, whose ``sleep_until`` returns at once with time moved
forward, so timing logic is tested exactly instead of with sleeps and margins.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """Seconds on a monotonic time line (not wall time: never compare across hosts)."""

    def now(self) -> float: ...

    def sleep_until(self, deadline: float) -> None:
        """Return at ``deadline`` (at once when it has passed)."""
        ...


class MonotonicClock:
    """The process's monotonic clock; ``sleep_until`` sleeps coarsely, then spins.

    The last half millisecond is spun because ``time.sleep`` overshoots by up to a
    scheduler tick, and a control loop wants its deadline, not a little after it.
    """

    def __init__(self, spin_s: float = 0.0005) -> None:
        self._spin_s = spin_s

    def now(self) -> float:
        return time.perf_counter()

    def sleep_until(self, deadline: float) -> None:
        while True:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                return
            if remaining > self._spin_s:
                time.sleep(remaining - self._spin_s)


class VirtualClock:
    """A clock that moves only when told to; thread-safe."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"VirtualClock cannot go backwards ({seconds} s)")
        with self._lock:
            self._now += seconds

    def sleep_until(self, deadline: float) -> None:
        with self._lock:
            self._now = max(self._now, deadline)
