"""In-process links: a thread-safe queue behind the Sender and Receiver protocols.

The learner is written against :class:`~robotrl.core.protocols.Sender` and
:class:`~robotrl.core.protocols.Receiver`; in one process (tests, benchmarks, a
learner and actor sharing a host without ZeroMQ) these queues stand in for the
sockets. Bounded: ``send`` refuses instead of blocking when the queue is full.
"""

from __future__ import annotations

import queue


class QueueLink[T]:
    """Both ends of one in-process link: ``send`` on one side, ``recv`` on the other."""

    def __init__(self, maxsize: int = 1024) -> None:
        self._queue: queue.Queue[T] = queue.Queue(maxsize)
        self.closed = False
        self.refused = 0

    def send(self, item: T) -> bool:
        if self.closed:
            return False
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self.refused += 1
            return False
        return True

    def recv(self, timeout_s: float) -> T | None:
        try:
            return self._queue.get(timeout=max(timeout_s, 0.0))
        except queue.Empty:
            return None

    def drain(self) -> list[T]:
        """Everything queued now (a test's view of what was sent)."""
        out = []
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                return out

    def close(self) -> None:
        self.closed = True
