"""An actor's transition stream at its control rate: the learner bench's realistic load.

A real actor records one transition per control tick and sends a batch once it holds
``n`` of them, so batch k leaves when its last tick has been recorded: at
``start + (sent + n) / hz``. Due times are counted from the start, not from the last
send, so a late batch (a full link, a descheduled thread) does not push the later ones
back: a robot's clock keeps ticking while its sender is held up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol


class Sized(Protocol):
    def __len__(self) -> int: ...


class PacedActor[B: Sized]:
    """Sends ``next_batch()`` through ``send`` at ``hz`` transitions per second.

    ``clock`` and ``wait`` are injectable (tests drive a fake clock); ``wait(seconds)`` returns
    True when the actor should stop, as :meth:`threading.Event.wait` does. A refused send (a
    full link) is retried every ``retry_s``, as an actor holds an unacknowledged batch."""

    def __init__(
        self,
        send: Callable[[B], bool],
        next_batch: Callable[[], B],
        hz: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[float], bool] | None = None,
        retry_s: float = 0.005,
    ) -> None:
        if hz <= 0:
            raise ValueError(f"hz must be > 0, got {hz}")
        self._send, self._next_batch, self.hz = send, next_batch, hz
        self._clock = clock
        self._stop = threading.Event()
        self._wait = wait if wait is not None else self._stop.wait
        self._retry_s = retry_s
        self.sent_transitions = 0
        self.sent_batches = 0
        self.refused = 0
        self.max_late_s = 0.0
        """The latest any batch left after its due time (the sender fell behind the robot)."""

    def stop(self) -> None:
        """Make :meth:`run` return at its next wait (from any thread)."""
        self._stop.set()

    def run(self, max_batches: int | None = None) -> None:
        """Send until stopped, or until ``max_batches`` batches went out."""
        start = self._clock()
        while not self._stop.is_set() and (max_batches is None or self.sent_batches < max_batches):
            batch = self._next_batch()
            due = start + (self.sent_transitions + len(batch)) / self.hz
            delay = due - self._clock()
            if delay > 0 and self._wait(delay):
                return
            while not self._send(batch):
                self.refused += 1
                if self._wait(self._retry_s):
                    return
            self.max_late_s = max(self.max_late_s, self._clock() - due)
            self.sent_transitions += len(batch)
            self.sent_batches += 1
