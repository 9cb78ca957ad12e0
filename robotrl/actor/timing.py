"""When a requested chunk counts as arrived: the one place wall-clock and virtual time differ.

- :class:`WallClockScheduler`: the chunk arrives at the first tick at which the backend
  has it; a request older than its deadline, or a dead backend, is a failure.
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
    """What both modes share: the backend, and the one request that may be in flight."""

    def __init__(self, backend: InferenceBackend, control_hz: float, timeout_s: float) -> None:
        self.backend = backend
        self._hz = control_hz
        self._timeout_s = timeout_s
        self._request_id: int | None = None

    @property
    def in_flight(self) -> bool:
        return self._request_id is not None

    def _submit(self, request: InferenceRequest) -> None:
        self.backend.submit(request)
        self._request_id = request.request_id

    def _is_answer(self, reply: InferenceReply) -> bool:
        """True (and nothing is in flight any more) if ``reply`` answers the request in flight;
        replies to requests of an earlier episode may still be queued and are skipped."""
        if reply.request_id != self._request_id:
            return False
        self._request_id = None
        return True


class WallClockScheduler(_Scheduler):
    def __init__(self, backend: InferenceBackend, clock: Clock, control_hz: float, timeout_s: float) -> None:
        super().__init__(backend, control_hz, timeout_s)
        self._clock = clock
        self._sent_at: float | None = None

    def request(self, request: InferenceRequest, tick: int) -> None:
        self._submit(request)
        self._sent_at = self._clock.now()

    def arrived(self, tick: int) -> Arrival | None:
        reply = self.backend.poll()
        if reply is None:
            return None
        if self._is_answer(reply):
            self._sent_at = None
        return Arrival(reply, tick)

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
                self._sent_at = None
                return Arrival(reply, tick), seconds_to_ticks(self._clock.now() - start, self._hz)

    def failure(self) -> str | None:
        reason = self.backend.failure()
        if reason is not None:
            return reason
        if self._sent_at is not None and self._clock.now() - self._sent_at > self._timeout_s:
            return f"inference request {self._request_id} got no answer within {self._timeout_s:.1f} s"
        return None


class VirtualTimeScheduler(_Scheduler):
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
        self._due_tick: int | None = None

    def request(self, request: InferenceRequest, tick: int) -> None:
        self._submit(request)
        self._due_tick = tick + seconds_to_ticks(self._latency.sample_seconds(self._rng), self._hz)

    def _collect(self) -> InferenceReply:
        while True:
            reply = self.backend.wait(self._timeout_s)
            if reply is None:
                raise InferenceFailedError(self.failure() or f"no chunk within {self._timeout_s:.1f} s")
            if self._is_answer(reply):
                return reply

    def arrived(self, tick: int) -> Arrival | None:
        if self._due_tick is None or not self.in_flight or tick < self._due_tick:
            return None
        due, self._due_tick = self._due_tick, None
        return Arrival(self._collect(), due)

    def await_first(self, tick: int, timeout_s: float) -> tuple[Arrival, int]:
        """The episode's first chunk: the world waits, so it arrives at ``tick``."""
        assert self._due_tick is not None
        waited = self._due_tick - tick
        self._due_tick = None
        return Arrival(self._collect(), tick), waited

    def failure(self) -> str | None:
        return self.backend.failure()
