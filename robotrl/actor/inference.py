"""Running the policy for the actor, in this process (the serial runner used in virtual
time and unit tests). The worker-process backend for wall-clock mode is in
:mod:`robotrl.actor.worker`; both implement ``InferenceBackend`` and share
:func:`run_inference`, so a chunk is produced the same way wherever it runs.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections import OrderedDict, deque
from dataclasses import replace

import numpy as np

from robotrl.actor.slots import PolicySlots
from robotrl.actor.strategies import held_to
from robotrl.core.protocols import WeightSource
from robotrl.core.types import FloatArray, InferenceReply, InferenceRequest


def seed_everything(seed: int) -> None:
    """Seed every generator a policy may draw from, so a request's answer is reproducible."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)


class Continuations:
    """The chunks a backend produced lately, so that a pipelined request can continue one
    (``InferenceRequest.continues``). A backend answers in the order it is asked, so the chunk a
    request continues is here before that request is computed; its rows are clipped to the
    action bounds, as the arm will execute them."""

    def __init__(self, bounds: tuple[FloatArray, FloatArray] | None = None, keep: int = 8) -> None:
        self._bounds = bounds
        self._keep = keep
        self._chunks: OrderedDict[int, InferenceReply] = OrderedDict()

    def remember(self, reply: InferenceReply) -> None:
        if reply.actions is None:
            return
        self._chunks[reply.request_id] = reply
        while len(self._chunks) > self._keep:
            self._chunks.popitem(last=False)

    def _newest_before(self, request: InferenceRequest) -> InferenceReply | None:
        """The newest chunk of the request's episode asked for before the one it continues: when
        that one failed, the arm goes on with this one, which it would have continued."""
        for reply in reversed(self._chunks.values()):
            if reply.epoch == request.epoch and reply.request_id < request.continues:
                return reply
        return None

    def complete(self, request: InferenceRequest) -> InferenceRequest:
        """``request`` with its committed prefix filled in from the chunk it continues (or, when
        that one failed, the newest earlier one of its episode); raises ValueError when there is
        none."""
        if request.continues < 0:
            return request
        earlier = self._chunks.get(request.continues) or self._newest_before(request)
        if earlier is None or earlier.epoch != request.epoch or earlier.actions is None:
            raise ValueError(
                f"request {request.request_id} continues chunk {request.continues}, which this backend"
                " has not produced in its episode"
            )
        start = min(max(request.observation.tick - earlier.obs_tick, 0), len(earlier.actions) - 1)
        rows = held_to(earlier.actions[start:], request.delay)  # past its end the arm holds its last
        if self._bounds is not None:
            rows = np.clip(rows, *self._bounds)
        return replace(request, prefix=np.asarray(rows, dtype=np.float32))


def run_inference(
    slots: PolicySlots, request: InferenceRequest, continuations: Continuations | None = None
) -> InferenceReply:
    """One inference with the active slot; an exception becomes an error reply, not a crash."""
    seed_everything(request.seed)
    start = time.perf_counter()
    version = slots.policy_version
    try:
        if continuations is not None:
            request = continuations.complete(request)
        elif request.continues >= 0:
            raise ValueError("this backend does not keep chunks for pipelined requests")
        actions = slots.active.infer(request.observation, request.prefix, request.delay)
        actions = np.asarray(actions, dtype=np.float32)
        error = None
    except Exception as exc:  # a policy bug must reach the actor's error budget, not kill the worker
        actions, error = None, f"{type(exc).__name__}: {exc}"
    reply = InferenceReply(
        request_id=request.request_id,
        epoch=request.epoch,
        obs_tick=request.observation.tick,
        actions=actions,
        policy_version=version,
        infer_s=time.perf_counter() - start,
        error=error,
    )
    if continuations is not None:
        continuations.remember(reply)
    return reply


class InProcessInference:
    """The policy runs inside ``submit``; new weights are installed just before an inference."""

    def __init__(
        self,
        slots: PolicySlots,
        weights: WeightSource | None = None,
        bounds: tuple[FloatArray, FloatArray] | None = None,
    ) -> None:
        self.slots = slots
        self._weights = weights
        self._replies: deque[InferenceReply] = deque()
        self._continuations = Continuations(bounds)

    def _stage_arrived(self) -> None:
        if self._weights is not None:
            update = self._weights.latest()
            if update is not None:
                self.slots.stage(update)

    def submit(self, request: InferenceRequest) -> None:
        self._stage_arrived()
        self.slots.swap_if_staged()
        self._replies.append(run_inference(self.slots, request, self._continuations))

    def newest_version(self) -> int:
        """Stages an update that has arrived (in this process loading happens when asked)."""
        self._stage_arrived()
        return self.slots.newest_version

    def wait_for_version(self, version: int, timeout_s: float, stop: threading.Event | None = None) -> int:
        """Stage arriving updates until one is at least ``version``, ``timeout_s`` passes or ``stop``
        is set (checked every 0.1 s); the newest version staged or active. Loading still waits
        for the next inference."""
        deadline = time.monotonic() + timeout_s
        self._stage_arrived()
        while self._weights is not None and self.slots.newest_version < version:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (stop is not None and stop.is_set()):
                break
            update = self._weights.recv(min(remaining, 0.1))
            if update is not None:
                self.slots.stage(update)
        return self.slots.newest_version

    def publisher_alive(self) -> bool:
        """Whether the learner's weight publisher was heard from lately (False offline)."""
        return self._weights is not None and self._weights.publisher_alive()

    def poll(self) -> InferenceReply | None:
        return self._replies.popleft() if self._replies else None

    def wait(self, timeout_s: float) -> InferenceReply | None:
        return self.poll()

    def wait_for_news(self, timeout_s: float) -> bool:
        return bool(self._replies)

    def failure(self) -> str | None:
        return None

    def close(self) -> None:
        if self._weights is not None:
            self._weights.close()
