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
from collections import deque

import numpy as np

from robotrl.actor.slots import PolicySlots
from robotrl.core.protocols import WeightSource
from robotrl.core.types import InferenceReply, InferenceRequest


def seed_everything(seed: int) -> None:
    """Seed every generator a policy may draw from, so a request's answer is reproducible."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)


def run_inference(slots: PolicySlots, request: InferenceRequest) -> InferenceReply:
    """One inference with the active slot; an exception becomes an error reply, not a crash."""
    seed_everything(request.seed)
    start = time.perf_counter()
    version = slots.policy_version
    try:
        actions = slots.active.infer(request.observation, request.prefix, request.delay)
        actions = np.asarray(actions, dtype=np.float32)
        error = None
    except Exception as exc:  # a policy bug must reach the actor's error budget, not kill the worker
        actions, error = None, f"{type(exc).__name__}: {exc}"
    return InferenceReply(
        request_id=request.request_id,
        epoch=request.epoch,
        obs_tick=request.observation.tick,
        actions=actions,
        policy_version=version,
        infer_s=time.perf_counter() - start,
        error=error,
    )


class InProcessInference:
    """The policy runs inside ``submit``; new weights are installed just before an inference."""

    def __init__(self, slots: PolicySlots, weights: WeightSource | None = None) -> None:
        self.slots = slots
        self._weights = weights
        self._replies: deque[InferenceReply] = deque()

    def _stage_arrived(self) -> None:
        if self._weights is not None:
            update = self._weights.latest()
            if update is not None:
                self.slots.stage(update)

    def submit(self, request: InferenceRequest) -> None:
        self._stage_arrived()
        self.slots.swap_if_staged()
        self._replies.append(run_inference(self.slots, request))

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

    def poll(self) -> InferenceReply | None:
        return self._replies.popleft() if self._replies else None

    def wait(self, timeout_s: float) -> InferenceReply | None:
        return self.poll()

    def failure(self) -> str | None:
        return None

    def close(self) -> None:
        if self._weights is not None:
            self._weights.close()
