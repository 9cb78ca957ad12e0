"""In-process links: a thread-safe queue behind the Sender and Receiver protocols.

The learner is written against :class:`~robotrl.core.protocols.Sender` and
:class:`~robotrl.core.protocols.BatchReceiver`; in one process (tests, benchmarks, a
learner and actor sharing a host without ZeroMQ) these queues stand in for the
sockets. Bounded: ``send`` refuses instead of blocking when the queue is full.
"""

from __future__ import annotations

import queue

from robotrl.core.batch import TransitionBatch
from robotrl.core.types import WeightUpdate
from robotrl.transport.transition_receiver import Received
from robotrl.transport.transitions import new_stream_id


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


class TransitionQueue(QueueLink[TransitionBatch]):
    """The in-process transition stream, as a :class:`~robotrl.core.protocols.BatchReceiver`.

    Batches are numbered per actor as they are received, in a stream of this queue's own;
    it keeps no ledger, since nothing queued outlives the process.
    """

    ledger = None

    def __init__(self, maxsize: int = 1024) -> None:
        super().__init__(maxsize)
        self.stream = new_stream_id()
        self._next_seq: dict[str, int] = {}
        self._held: TransitionBatch | None = None

    def recv_item(self, timeout_s: float) -> Received | None:
        batch = self._held = self.recv(timeout_s)
        if batch is None:
            return None
        seq = self._next_seq.get(batch.actor_id, 0)
        self._next_seq[batch.actor_id] = seq + 1
        return Received(batch.actor_id, self.stream, seq, batch)

    def hand_back(self) -> None:
        """Queue the batch handed out last again: no actor outside keeps it to resend."""
        if self._held is not None:
            held, self._held = self._held, None
            self.send(held)

    def commit(self) -> None:
        """Forget the batch handed out last: nothing outside waits for an acknowledgement."""
        self._held = None


class DroppedWeights:
    """A weight link that accepts every version and drops it; ``sent`` counts them. An offline
    learner's (``learner.offline``: no actor listens) and the learner bench's (which must not
    hold every version in memory)."""

    def __init__(self) -> None:
        self.sent = 0

    def send(self, item: WeightUpdate) -> bool:
        self.sent += 1
        return True

    def close(self) -> None:
        """Nothing to release."""
