"""Transitions as a struct of arrays: the unit the actor sends and the learner ingests.

One :class:`Transition` per tick is convenient to build and read; thousands per
second are not. A :class:`TransitionBatch` stacks the same fields column by
column so the wire carries a few large frames and the replay buffer copies whole
slices. :meth:`TransitionBatch.from_transitions` and
:meth:`TransitionBatch.to_transitions` convert losslessly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt

from robotrl.core.types import Observation, Transition

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

#: Per-row integer columns, in Transition field order.
INT_COLUMNS = ("episode_id", "tick", "chunk_id", "index_in_chunk", "policy_version", "delay_ticks")
#: Per-row flag columns.
BOOL_COLUMNS = ("terminated", "truncated", "intervention")
#: Per-row float64 time columns (seconds, logs only).
TIME_COLUMNS = ("obs_time", "action_time", "obs_timestamp")


@dataclass(frozen=True, slots=True)
class TransitionBatch:
    """N transitions of one actor, column by column.

    Rows that end an episode may carry a next observation; ``next_rows`` lists
    those rows (ascending) and the ``next_*`` arrays hold their next observations.
    Every row's instruction is ``instructions[instruction_index[row]]``.
    """

    actor_id: str
    state: npt.NDArray[np.float32]
    images: Mapping[str, npt.NDArray[np.uint8]]
    action: npt.NDArray[np.float32]
    proposed_action: npt.NDArray[np.float32]
    reward: npt.NDArray[np.float32]
    terminated: BoolArray
    truncated: BoolArray
    intervention: BoolArray
    episode_id: IntArray
    tick: IntArray
    chunk_id: IntArray
    index_in_chunk: IntArray
    policy_version: IntArray
    delay_ticks: IntArray
    obs_time: npt.NDArray[np.float64]
    action_time: npt.NDArray[np.float64]
    obs_timestamp: npt.NDArray[np.float64]
    instructions: tuple[str, ...]
    instruction_index: npt.NDArray[np.int32]
    next_rows: IntArray
    next_state: npt.NDArray[np.float32]
    next_images: Mapping[str, npt.NDArray[np.uint8]]
    next_tick: IntArray
    next_timestamp: npt.NDArray[np.float64]

    def __post_init__(self) -> None:
        """Check that every column agrees on N (and M for next observations)."""
        n = len(self.state)
        if self.state.ndim != 2:
            raise ValueError(f"state must be (N, state_dim), got {self.state.shape}")
        if self.action.ndim != 2 or self.proposed_action.shape != self.action.shape:
            raise ValueError(
                f"action {self.action.shape} and proposed_action {self.proposed_action.shape} "
                "must both be (N, action_dim)"
            )
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, np.ndarray) and not f.name.startswith("next_") and len(value) != n:
                raise ValueError(f"column {f.name!r} has {len(value)} rows, state has {n}")
        for cam, img in self.images.items():
            if img.ndim != 4 or len(img) != n or img.shape[3] != 3:
                raise ValueError(f"images[{cam!r}] must be (N, H, W, 3), got {img.shape}")
        if len(self.instruction_index) and (
            self.instruction_index.min() < 0 or self.instruction_index.max() >= len(self.instructions)
        ):
            raise ValueError("instruction_index points outside instructions")
        m = len(self.next_rows)
        if m:
            if self.next_rows.min() < 0 or self.next_rows.max() >= n:
                raise ValueError("next_rows points outside the batch")
            if (np.diff(self.next_rows) <= 0).any():
                raise ValueError("next_rows must be strictly ascending")
        if self.next_state.shape != (m, self.state.shape[1]):
            raise ValueError(f"next_state must be ({m}, {self.state.shape[1]}), got {self.next_state.shape}")
        if len(self.next_tick) != m or len(self.next_timestamp) != m:
            raise ValueError("next_tick and next_timestamp need one entry per next_rows entry")
        if set(self.next_images) != set(self.images):
            raise ValueError("next_images must have the same cameras as images")
        for cam, img in self.next_images.items():
            if img.shape != (m, *self.images[cam].shape[1:]):
                raise ValueError(f"next_images[{cam!r}] must be ({m}, H, W, 3), got {img.shape}")

    def __len__(self) -> int:
        return len(self.state)

    @property
    def nbytes(self) -> int:
        """Bytes of array data carried (what the wire sends, headers aside)."""
        total = 0
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, np.ndarray):
                total += value.nbytes
            elif isinstance(value, Mapping):
                total += sum(int(v.nbytes) for v in value.values())
        return total

    @classmethod
    def from_transitions(cls, transitions: Sequence[Transition]) -> TransitionBatch:
        """Stack ``transitions`` (one actor, same shapes and cameras) into columns."""
        if not transitions:
            raise ValueError("cannot batch zero transitions")
        first = transitions[0]
        cams = sorted(first.observation.images)
        for t in transitions:
            if t.actor_id != first.actor_id:
                raise ValueError(f"one batch is one actor: {t.actor_id!r} != {first.actor_id!r}")
            if t.observation.tick != t.tick:
                raise ValueError(
                    f"transition at tick {t.tick} holds an observation of tick {t.observation.tick}"
                )
            if sorted(t.observation.images) != cams:
                raise ValueError("every transition in a batch needs the same cameras")
        instructions: dict[str, int] = {}
        index = [instructions.setdefault(t.observation.instruction, len(instructions)) for t in transitions]
        ends = [i for i, t in enumerate(transitions) if t.next_observation is not None]
        nexts = [t.next_observation for t in transitions if t.next_observation is not None]
        state_dim = len(first.observation.state)

        def stack(values: list[Any], dtype: Any, empty_shape: tuple[int, ...]) -> Any:
            if not values:
                return np.zeros(empty_shape, dtype=dtype)
            return np.stack(values).astype(dtype, copy=False)

        return cls(
            actor_id=first.actor_id,
            state=stack([t.observation.state for t in transitions], np.float32, (0, state_dim)),
            images={c: stack([t.observation.images[c] for t in transitions], np.uint8, ()) for c in cams},
            action=stack([t.action for t in transitions], np.float32, ()),
            proposed_action=stack([t.proposed_action for t in transitions], np.float32, ()),
            reward=np.array([t.reward for t in transitions], dtype=np.float32),
            terminated=np.array([t.terminated for t in transitions], dtype=np.bool_),
            truncated=np.array([t.truncated for t in transitions], dtype=np.bool_),
            intervention=np.array([t.intervention for t in transitions], dtype=np.bool_),
            episode_id=np.array([t.episode_id for t in transitions], dtype=np.int64),
            tick=np.array([t.tick for t in transitions], dtype=np.int64),
            chunk_id=np.array([t.chunk_id for t in transitions], dtype=np.int64),
            index_in_chunk=np.array([t.index_in_chunk for t in transitions], dtype=np.int64),
            policy_version=np.array([t.policy_version for t in transitions], dtype=np.int64),
            delay_ticks=np.array([t.delay_ticks for t in transitions], dtype=np.int64),
            obs_time=np.array([t.obs_time for t in transitions], dtype=np.float64),
            action_time=np.array([t.action_time for t in transitions], dtype=np.float64),
            obs_timestamp=np.array([t.observation.timestamp for t in transitions], dtype=np.float64),
            instructions=tuple(instructions),
            instruction_index=np.array(index, dtype=np.int32),
            next_rows=np.array(ends, dtype=np.int64),
            next_state=stack([o.state for o in nexts], np.float32, (0, state_dim)),
            next_images={
                c: stack([o.images[c] for o in nexts], np.uint8, (0, *first.observation.images[c].shape))
                for c in cams
            },
            next_tick=np.array([o.tick for o in nexts], dtype=np.int64),
            next_timestamp=np.array([o.timestamp for o in nexts], dtype=np.float64),
        )

    def to_transitions(self) -> list[Transition]:
        """One :class:`Transition` per row; arrays are views into this batch, not copies."""
        next_obs: dict[int, Observation] = {}
        for j, row in enumerate(self.next_rows.tolist()):
            next_obs[row] = Observation(
                tick=int(self.next_tick[j]),
                state=self.next_state[j],
                images=MappingProxyType({c: v[j] for c, v in self.next_images.items()}),
                instruction=self.instructions[self.instruction_index[row]],
                timestamp=float(self.next_timestamp[j]),
            )
        ints = {c: getattr(self, c).tolist() for c in INT_COLUMNS}
        flags = {c: getattr(self, c).tolist() for c in BOOL_COLUMNS}
        times = {c: getattr(self, c).tolist() for c in TIME_COLUMNS}
        rewards = self.reward.tolist()
        instruction_index = self.instruction_index.tolist()
        out = []
        for i in range(len(self)):
            obs = Observation(
                tick=ints["tick"][i],
                state=self.state[i],
                images=MappingProxyType({c: v[i] for c, v in self.images.items()}),
                instruction=self.instructions[instruction_index[i]],
                timestamp=times["obs_timestamp"][i],
            )
            out.append(
                Transition(
                    actor_id=self.actor_id,
                    episode_id=ints["episode_id"][i],
                    tick=ints["tick"][i],
                    observation=obs,
                    action=self.action[i],
                    proposed_action=self.proposed_action[i],
                    reward=rewards[i],
                    terminated=flags["terminated"][i],
                    truncated=flags["truncated"][i],
                    intervention=flags["intervention"][i],
                    chunk_id=ints["chunk_id"][i],
                    index_in_chunk=ints["index_in_chunk"][i],
                    policy_version=ints["policy_version"][i],
                    delay_ticks=ints["delay_ticks"][i],
                    obs_time=times["obs_time"][i],
                    action_time=times["action_time"][i],
                    next_observation=next_obs.get(i),
                )
            )
        return out
