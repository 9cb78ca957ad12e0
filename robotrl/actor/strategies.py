"""How a newly arrived chunk is merged with the plan the robot is executing.

A :class:`Plan` is the contiguous run of planned actions from some tick on, with the
stamps of the chunk each came from. :func:`merge` returns the plan from tick ``now``
on after a chunk arrives; ticks before ``now`` have been executed and never come back.

- ``sync``: the robot held still while the chunk was computed; it runs from its start.
- ``naive_async``: the chunk's rows for ticks already gone are dropped; from ``now`` on
  the new chunk replaces the old plan.
- ``blend``: on the overlap with the old plan, ``w * old + (1 - w) * new`` with
  ``w = decay ** (k + 1)`` at the k-th overlapping tick; then the new chunk.
- ``prefix`` (real-time chunking): the policy was given the old plan's actions for the
  ticks it would take to infer and reproduced them, so switching at ``now`` is seamless;
  the merge is the same as ``naive_async``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from robotrl.config.actor import Strategy
from robotrl.core.types import ActionChunk, FloatArray

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Plan:
    """Planned actions for ticks ``start_tick .. start_tick + len(actions) - 1``.

    Per row: the chunk it came from (the newest one, for blended rows), its row index
    in that chunk, the chunk's policy version and measured delay.
    """

    start_tick: int
    actions: FloatArray
    chunk_id: IntArray
    index_in_chunk: IntArray
    policy_version: IntArray
    delay_ticks: IntArray

    @classmethod
    def empty(cls, action_dim: int, start_tick: int = 0) -> Plan:
        z = np.zeros(0, dtype=np.int64)
        return cls(start_tick, np.zeros((0, action_dim), np.float32), z, z, z, z)

    @classmethod
    def from_chunk(cls, chunk: ActionChunk) -> Plan:
        h = chunk.horizon
        return cls(
            start_tick=chunk.start_tick,
            actions=chunk.actions,
            chunk_id=np.full(h, chunk.chunk_id, np.int64),
            index_in_chunk=np.arange(h, dtype=np.int64),
            policy_version=np.full(h, chunk.policy_version, np.int64),
            delay_ticks=np.full(h, chunk.delay_ticks, np.int64),
        )

    def __len__(self) -> int:
        return len(self.actions)

    @property
    def end_tick(self) -> int:
        return self.start_tick + len(self.actions)

    def from_tick(self, tick: int) -> Plan:
        """The rows for ``tick`` on (views, no copy)."""
        skip = min(max(tick - self.start_tick, 0), len(self))
        return Plan(
            self.start_tick + skip,
            self.actions[skip:],
            self.chunk_id[skip:],
            self.index_in_chunk[skip:],
            self.policy_version[skip:],
            self.delay_ticks[skip:],
        )

    def remaining(self, tick: int) -> int:
        """Planned ticks left from ``tick`` on (0 when the plan does not reach ``tick``)."""
        if tick < self.start_tick:
            return 0
        return max(self.end_tick - tick, 0)


def held_to(rows: FloatArray, length: int) -> FloatArray:
    """``rows`` cut or extended to ``length``, the last row repeated past their end: what the arm
    executes from a plan that runs out (it holds its last command)."""
    if len(rows) >= length:
        return rows[:length]
    return np.concatenate([rows, np.repeat(rows[-1:], length - len(rows), axis=0)])


def merge(plan: Plan, chunk: ActionChunk, now: int, strategy: Strategy, blend_decay: float) -> Plan:
    """The plan from ``now`` on after ``chunk`` arrives at tick ``now``."""
    new = Plan.from_chunk(chunk).from_tick(now)
    if strategy is not Strategy.blend:
        return new
    old = plan.from_tick(now)
    if old.start_tick != new.start_tick or len(old) == 0 or len(new) == 0:
        return new
    overlap = min(len(old), len(new))
    weights = (blend_decay ** np.arange(1, overlap + 1, dtype=np.float64)).astype(np.float32)[:, None]
    actions = new.actions.copy()
    actions[:overlap] = weights * old.actions[:overlap] + (1.0 - weights) * new.actions[:overlap]
    return Plan(
        new.start_tick, actions, new.chunk_id, new.index_in_chunk, new.policy_version, new.delay_ticks
    )
