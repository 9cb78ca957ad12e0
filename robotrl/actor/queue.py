"""The tick-indexed action queue: what the robot will do, tick by tick, in this episode.

It owns the plan and the episode epoch. A reset bumps the epoch and empties the plan,
so a chunk computed in an earlier episode is refused when it arrives (lerobot did not
clear its queue on reset and leaked the old episode's actions, #1116). A chunk of the
wrong shape or with non-finite values is refused before any of it can reach the arm.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robotrl.actor.strategies import Plan, merge
from robotrl.config.actor import Strategy
from robotrl.core.types import ActionChunk, FloatArray


@dataclass(frozen=True, slots=True)
class PlannedAction:
    """The action planned for one tick, with the stamps of the chunk it came from."""

    tick: int
    action: FloatArray
    chunk_id: int
    index_in_chunk: int
    policy_version: int
    delay_ticks: int


class ChunkRefusedError(ValueError):
    """A chunk that must not reach the arm; ``reason`` is countable."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


class ActionQueue:
    def __init__(self, action_dim: int, horizon: int, strategy: Strategy, blend_decay: float = 0.5) -> None:
        self.action_dim = action_dim
        self.horizon = horizon
        self.strategy = strategy
        self.blend_decay = blend_decay
        self.epoch = 0
        self._plan = Plan.empty(action_dim)

    def reset(self) -> int:
        """Start a new episode: empty the plan and bump the epoch; returns the new epoch."""
        self.epoch += 1
        self._plan = Plan.empty(self.action_dim)
        return self.epoch

    def remaining(self, tick: int) -> int:
        """Planned actions left from ``tick`` on."""
        return self._plan.remaining(tick)

    def committed(self, tick: int, length: int) -> FloatArray:
        """The planned actions for ticks ``tick .. tick + length - 1`` (a copy), for a prefix."""
        if length > self.remaining(tick):
            raise ValueError(f"only {self.remaining(tick)} planned actions from tick {tick}, asked {length}")
        rows = self._plan.from_tick(tick).actions[:length]
        return np.array(rows, dtype=np.float32, copy=True)

    def check(self, chunk: ActionChunk) -> None:
        """Raise :class:`ChunkRefusedError` unless ``chunk`` may be merged into this episode's plan."""
        if chunk.epoch != self.epoch:
            raise ChunkRefusedError(
                "stale_epoch", f"chunk {chunk.chunk_id} is from epoch {chunk.epoch}, now {self.epoch}"
            )
        shape = chunk.actions.shape
        if shape != (self.horizon, self.action_dim):
            raise ChunkRefusedError(
                "shape", f"chunk {chunk.chunk_id} is {shape}, expected ({self.horizon}, {self.action_dim})"
            )
        if chunk.actions.dtype != np.float32:
            raise ChunkRefusedError(
                "dtype", f"chunk {chunk.chunk_id} is {chunk.actions.dtype}, expected float32"
            )
        if not np.isfinite(chunk.actions).all():
            raise ChunkRefusedError("non_finite", f"chunk {chunk.chunk_id} holds NaN or inf")

    def merge(self, chunk: ActionChunk, now: int) -> None:
        """Merge a checked chunk arriving at tick ``now`` by the strategy; raises ChunkRefusedError."""
        self.check(chunk)
        if chunk.end_tick <= now:
            raise ChunkRefusedError(
                "expired", f"chunk {chunk.chunk_id} ends at tick {chunk.end_tick}, now {now}"
            )
        self._plan = merge(self._plan, chunk, now, self.strategy, self.blend_decay)

    def pop(self, tick: int) -> PlannedAction | None:
        """The action for ``tick``, dropping anything planned before it; None when starved."""
        self._plan = self._plan.from_tick(tick)
        if self._plan.remaining(tick) == 0:
            return None
        p = self._plan
        action = PlannedAction(
            tick,
            p.actions[0],
            int(p.chunk_id[0]),
            int(p.index_in_chunk[0]),
            int(p.policy_version[0]),
            int(p.delay_ticks[0]),
        )
        self._plan = p.from_tick(tick + 1)
        return action
