"""When a requested chunk counts as arrived: the one place wall-clock and virtual time differ.

- :class:`WallClockScheduler`: the chunk arrives at the first tick at which the backend
  has it; a request older than its deadline, or a dead backend, is a failure. Between ticks
  the loop waits on the backend, so what it sends is taken as it comes (stamped at the tick
  ahead, whose observation the loop holds).
- :class:`VirtualTimeScheduler`: a latency model draws how long the inference takes;
  the chunk arrives exactly that many ticks after its observation, however long the
  computation really took. Seeded, so a run is reproducible bit for bit.

Either way the chunk's delay is the ticks actually consumed (``ready_tick - obs_tick``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robotrl.actor.latency import seconds_to_ticks
from robotrl.core.clock import Clock
from robotrl.core.protocols import InferenceBackend, LatencyModel
from robotrl.core.types import InferenceReply, InferenceRequest


@dataclass(frozen=True, slots=True)
class Arrival:
    reply: InferenceReply
    ready_tick: int


class InferenceFailedError(RuntimeError):
    """The backend cannot serve: crashed, hung past its deadline, or unreachable."""


class _Scheduler:
    """What both modes share: the backend, and the requests in flight, oldest first (a backend
    answers in the order it is asked)."""

    def __init__(self, backend: InferenceBackend, control_hz: float, timeout_s: float) -> None:
        self.backend = backend
        self._hz = control_hz
        self._timeout_s = timeout_s
        self._in_flight: dict[int, float] = {}
        """request id -> when it was sent (wall clock, seconds) or is due (virtual time, tick)."""

    def forget(self) -> None:
        """A new episode: answers to the requests in flight are skipped when they come."""
        self._in_flight.clear()

    def _submit(self, request: InferenceRequest, stamp: float) -> None:
        self.backend.submit(request)
        self._in_flight[request.request_id] = stamp

    def _is_answer(self, reply: InferenceReply) -> bool:
        """True (and it is no longer in flight) if ``reply`` answers a request in flight; replies
        to requests of an earlier episode may still be queued and are skipped."""
        return self._in_flight.pop(reply.request_id, None) is not None


class WallClockScheduler(_Scheduler):
    def __init__(self, backend: InferenceBackend, clock: Clock, control_hz: float, timeout_s: float) -> None:
        super().__init__(backend, control_hz, timeout_s)
        self._clock = clock

    def request(self, request: InferenceRequest, tick: int) -> None:
        self._submit(request, self._clock.now())

    def arrived(self, tick: int) -> list[Arrival]:
        """Every reply the backend holds, in order, stamped at ``tick`` (a stale one is refused
        by the queue for its episode epoch)."""
        out = []
        while (reply := self.backend.poll()) is not None:
            self._is_answer(reply)
            out.append(Arrival(reply, tick))
        return out

    def wait_for_news(self, deadline: float) -> bool:
        """Wait until the backend sends something (a chunk, new weights) or ``deadline`` passes;
        True when something came, for the loop to take it between ticks."""
        left = deadline - self._clock.now()
        return left > 0 and self.backend.wait_for_news(left)

    def await_first(self, tick: int, timeout_s: float) -> tuple[Arrival, int]:
        """Block for the in-flight chunk while the robot waits (episode start).

        Returns the arrival, stamped at ``tick`` (no control tick was consumed), and the
        ticks the wait lasted, for the delay estimate.
        """
        start = self._clock.now()
        while True:
            left = timeout_s - (self._clock.now() - start)
            reply = self.backend.wait(max(left, 0.0)) if left > 0 else None
            if reply is None:
                raise InferenceFailedError(
                    self.failure() or f"no chunk within {timeout_s:.1f} s of the request"
                )
            if self._is_answer(reply):
                return Arrival(reply, tick), seconds_to_ticks(self._clock.now() - start, self._hz)

    def failure(self) -> str | None:
        reason = self.backend.failure()
        if reason is not None:
            return reason
        if self._in_flight:
            rid, sent_at = next(iter(self._in_flight.items()))
            if self._clock.now() - sent_at > self._timeout_s:
                return f"inference request {rid} got no answer within {self._timeout_s:.1f} s"
        return None


class VirtualTimeScheduler(_Scheduler):
    """Each request's delay is drawn from the latency model; requests in flight together are
    answered in order (a request due before an earlier one waits for it), as a server that
    works on several at once but answers them in turn."""

    def __init__(
        self,
        backend: InferenceBackend,
        latency: LatencyModel,
        rng: np.random.Generator,
        control_hz: float,
        timeout_s: float,
    ) -> None:
        super().__init__(backend, control_hz, timeout_s)
        self._latency = latency
        self._rng = rng

    def request(self, request: InferenceRequest, tick: int) -> None:
        due = tick + seconds_to_ticks(self._latency.sample_seconds(self._rng), self._hz)
        if self._in_flight:
            due = max(due, int(next(reversed(self._in_flight.values()))))
        self._submit(request, due)

    def _collect(self, request_id: int) -> InferenceReply:
        while True:
            reply = self.backend.wait(self._timeout_s)
            if reply is None:
                raise InferenceFailedError(self.failure() or f"no chunk within {self._timeout_s:.1f} s")
            if reply.request_id == request_id:
                del self._in_flight[request_id]
                return reply
            if reply.request_id in self._in_flight:
                raise InferenceFailedError(
                    f"reply {reply.request_id} came before {request_id}'s: out of order"
                )

    def arrived(self, tick: int) -> list[Arrival]:
        """The chunks due by ``tick``, oldest first, each stamped at its due tick."""
        out = []
        for rid, due in list(self._in_flight.items()):
            if due > tick:
                break
            out.append(Arrival(self._collect(rid), int(due)))
        return out

    def wait_for_news(self, deadline: float) -> bool:
        """Nothing arrives between ticks in virtual time: a chunk arrives at its due tick."""
        return False

    def await_first(self, tick: int, timeout_s: float) -> tuple[Arrival, int]:
        """The episode's first chunk: the world waits, so it arrives at ``tick``."""
        rid, due = next(iter(self._in_flight.items()))
        return Arrival(self._collect(rid), tick), int(due) - tick

    def failure(self) -> str | None:
        return self.backend.failure()
