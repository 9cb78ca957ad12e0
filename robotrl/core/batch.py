"""Transitions as a struct of arrays: the unit the actor sends and the learner ingests.

One :class:`Transition` per tick is convenient to build and read; thousands per
second are not. A :class:`TransitionBatch` stacks the same fields column by
column so the wire carries a few large frames and the replay buffer copies whole
slices. :meth:`TransitionBatch.from_transitions` and
:meth:`TransitionBatch.to_transitions` convert losslessly. The columns and their
dtypes are :data:`robotrl.core.columns.COLUMNS`; the fields below are their typed view.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from operator import attrgetter
from types import MappingProxyType
from typing import Any, Final, NamedTuple

import numpy as np
import numpy.typing as npt

from robotrl.core.columns import ARRAY_COLUMNS, IMAGES, Column, Shape
from robotrl.core.types import Observation, Transition

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


_COLUMN_FIELDS: Final = (
    *(c.name for c in ARRAY_COLUMNS),
    *(c.next_name for c in ARRAY_COLUMNS if c.next_name),
)
"""The batch fields of the array columns and of their next-observation twins."""
_ARRAY_FIELDS: Final = (*_COLUMN_FIELDS, "instruction_index", "next_rows")
_ARRAYS: Final = attrgetter(*_ARRAY_FIELDS)
"""Every plain array field of a batch, in one call."""
_ROW_SIZES: Final = {Shape.SCALAR: 0, Shape.STATE: 1, Shape.ACTION: 2}


class JoinedIndices(NamedTuple):
    """The index fields of batches joined into one (:meth:`TransitionBatch.joined_indices`)."""

    instructions: tuple[str, ...]
    instruction_index: npt.NDArray[np.int32]
    next_rows: npt.NDArray[np.int64]


_ARRAY_ROWS: Final = (
    *((False, _ROW_SIZES[c.shape]) for c in ARRAY_COLUMNS),
    *((True, _ROW_SIZES[c.shape]) for c in ARRAY_COLUMNS if c.next_name),
    (False, 0),
    (True, 0),
)
"""Per field of :data:`_ARRAYS`: whether it has a row per next observation, and which row size
it has (an index into scalar, state, action)."""
_SHAPE: Final = attrgetter("shape")
_UNSIGNED: Final[dict[int, np.dtype[Any]]] = {4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}
"""The unsigned integer dtype of 4 and 8 bytes (an index array read as unsigned: see __post_init__)."""


@functools.lru_cache(maxsize=64)
def _expected_shapes(rows: int, next_rows: int, state_dim: int, action_dim: int) -> tuple[Any, ...]:
    """The shape of each field of :data:`_ARRAYS` (cached: a stream repeats a few sizes)."""
    sizes = ((), (state_dim,), (action_dim,))
    return tuple((next_rows if per_next else rows, *sizes[size]) for per_next, size in _ARRAY_ROWS)


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
        """Check that every column agrees on N (and M for next observations) and on its row shape,
        and that the indices point inside the batch. Kept to a few microseconds (the shapes of all
        plain fields compared as one tuple); a batch received packed skips the shapes
        (:meth:`of_shaped_columns`)."""
        if self.state.ndim != 2 or self.action.ndim != 2:
            raise ValueError(f"state {self.state.shape} and action {self.action.shape} must be (N, dim)")
        rows, next_rows = len(self.state), len(self.next_rows)
        want = _expected_shapes(rows, next_rows, self.state.shape[1], self.action.shape[1])
        got = tuple(map(_SHAPE, _ARRAYS(self)))
        if got != want:
            wrong = next(x for x in zip(_ARRAY_FIELDS, got, want, strict=True) if x[1] != x[2])
            raise ValueError("field {!r} is {}, must be {}".format(*wrong))
        self._check_cameras_and_indices()

    @classmethod
    def of_shaped_columns(
        cls,
        actor_id: str,
        columns: Mapping[str, npt.NDArray[Any]],
        images: Mapping[str, npt.NDArray[np.uint8]],
        next_images: Mapping[str, npt.NDArray[np.uint8]],
        instructions: tuple[str, ...],
    ) -> TransitionBatch:
        """A batch of ``columns`` (every plain field) whose shapes are already those ``__init__``
        requires: the views a packed frame's layout cuts, by construction of that shape, from one
        frame of checked length (:meth:`robotrl.wire.packed_columns.Layout.unpack`). Checks the
        cameras and the indices as ``__init__`` does, not the shapes again: that comparison is
        3 of the 37 microseconds a state batch takes through the wire. :class:`KeyError` for a
        missing field."""
        batch = object.__new__(cls)
        set_field = object.__setattr__
        set_field(batch, "actor_id", actor_id)
        set_field(batch, "images", images)
        set_field(batch, "next_images", next_images)
        set_field(batch, "instructions", instructions)
        for name in _ARRAY_FIELDS:
            set_field(batch, name, columns[name])
        batch._check_cameras_and_indices()
        return batch

    def _check_cameras_and_indices(self) -> None:
        """The cameras agree with N and M, and the indices point inside the batch."""
        n, m = len(self.state), len(self.next_rows)
        for cam, img in self.images.items():
            if img.ndim != 4 or len(img) != n or img.shape[3] != 3:
                raise ValueError(f"images[{cam!r}] must be (N, H, W, 3), got {img.shape}")
        index = self.instruction_index
        if index.dtype.kind not in "iu":
            raise ValueError(f"instruction_index must hold integers, not {index.dtype}")
        if index.itemsize < 4 or not index.dtype.isnative:  # rare: widened first, so the view holds
            index = index.astype(np.int64)
        # One pass, not min and max: a negative index read as unsigned is at least 2**31, more
        # than any list of instructions. argmax, not max: it skips the ufunc reduction's set-up,
        # over half of max's time on a batch's rows.
        unsigned = index.view(_UNSIGNED[index.itemsize])
        if n and unsigned[unsigned.argmax()] >= len(self.instructions):
            raise ValueError("instruction_index points outside instructions")
        next_rows = self.next_rows.tolist()  # a row or two: Python is faster than numpy here
        if next_rows and (next_rows[0] < 0 or next_rows[-1] >= n):
            raise ValueError("next_rows points outside the batch")
        if len(next_rows) > 1 and any(a >= b for a, b in itertools.pairwise(next_rows)):
            raise ValueError("next_rows must be strictly ascending")
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
        cameras = sum(a.nbytes for images in (self.images, self.next_images) for a in images.values())
        return int(sum(a.nbytes for a in _ARRAYS(self))) + cameras

    @classmethod
    def of(
        cls,
        actor_id: str,
        columns: Mapping[str, Any],
        images: Mapping[str, npt.NDArray[np.uint8]] | None = None,
        instructions: Sequence[str] = ("",),
        instruction_index: npt.NDArray[np.int32] | None = None,
    ) -> TransitionBatch:
        """A batch of the given ``columns`` (state and action at least), every other column at its
        default (:data:`~robotrl.core.columns.COLUMNS`), no next observation. Rows without an
        ``instruction_index`` all have the first instruction."""
        state, action = columns["state"], columns["action"]
        n, images = len(state), dict(images or {})
        arrays = {
            c.name: np.asarray(columns[c.name], c.dtype)
            if c.name in columns
            else np.full((n, *_row_shape(c, state, action)), c.default, c.dtype)
            for c in ARRAY_COLUMNS
        }
        return cls(
            actor_id=actor_id,
            images=images,
            instructions=tuple(instructions),
            instruction_index=np.zeros(n, np.int32) if instruction_index is None else instruction_index,
            next_rows=np.zeros(0, np.int64),
            next_images={c: np.zeros((0, *img.shape[1:]), np.uint8) for c, img in images.items()},
            **arrays,
            **{
                c.next_name: np.zeros((0, *arrays[c.name].shape[1:]), c.dtype)
                for c in ARRAY_COLUMNS
                if c.next_name
            },
        )

    def ending_with(
        self, next_columns: Mapping[str, Any], next_images: Mapping[str, npt.NDArray[np.uint8]]
    ) -> TransitionBatch:
        """This batch with a next observation after its last row: ``next_columns`` holds one row of
        the observed columns (``state``, ``tick``, ...) by column name; one it lacks holds its default."""
        fields_: dict[str, Any] = {
            c.next_name: np.asarray(next_columns[c.name], c.dtype)
            if c.name in next_columns
            else np.full((1, *getattr(self, c.name).shape[1:]), c.default, c.dtype)
            for c in ARRAY_COLUMNS
            if c.next_name
        }
        return replace(
            self, next_rows=np.array([len(self) - 1], np.int64), next_images=dict(next_images), **fields_
        )

    @staticmethod
    def joined_indices(batches: Sequence[TransitionBatch]) -> JoinedIndices:
        """What joining ``batches`` of one actor into one batch (rows in order) makes of the
        fields that point at rows or instructions; every other field is its members' end to end."""
        first = batches[0]
        if any(b.actor_id != first.actor_id for b in batches):
            raise ValueError("one batch is one actor: cannot join batches of several")
        instructions: dict[str, int] = {}
        index = [
            np.array([instructions.setdefault(s, len(instructions)) for s in b.instructions], np.int32)[
                b.instruction_index
            ]
            for b in batches
        ]
        starts = itertools.accumulate((len(b) for b in batches[:-1]), initial=0)
        return JoinedIndices(
            tuple(instructions),
            np.concatenate(index),
            np.concatenate([b.next_rows + start for b, start in zip(batches, starts, strict=True)]),
        )

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
        arrays = {c.name: _stack([c.of(t) for t in transitions], c) for c in ARRAY_COLUMNS}
        next_arrays = {
            c.next_name: _stack([attrgetter(_in_observation(c))(o) for o in nexts], c, arrays[c.name])
            for c in ARRAY_COLUMNS
            if c.next_name
        }
        return cls(
            actor_id=first.actor_id,
            images={
                c: np.stack([t.observation.images[c] for t in transitions]).astype(np.uint8, copy=False)
                for c in cams
            },
            instructions=tuple(instructions),
            instruction_index=np.array(index, dtype=np.int32),
            next_rows=np.array(ends, dtype=np.int64),
            next_images={
                c: _stack(
                    [o.images[c] for o in nexts], IMAGES, np.zeros((0, *first.observation.images[c].shape))
                )
                for c in cams
            },
            **arrays,
            **next_arrays,
        )

    def to_transitions(self) -> list[Transition]:
        """One :class:`Transition` per row; arrays are views into this batch, not copies."""
        scalars = {c.name: getattr(self, c.name).tolist() for c in ARRAY_COLUMNS if c.shape is Shape.SCALAR}
        rows = {c.name: getattr(self, c.name) for c in ARRAY_COLUMNS if c.shape is not Shape.SCALAR}
        instruction_index = self.instruction_index.tolist()
        next_of = {row: j for j, row in enumerate(self.next_rows.tolist())}
        out = []
        for i in range(len(self)):
            values = {name: v[i] for name, v in (*scalars.items(), *rows.items())}
            instruction = self.instructions[instruction_index[i]]
            observation = self._observation(values, self.images, i, instruction)
            next_observation = None
            if i in next_of:
                j = next_of[i]
                next_values = {
                    c.name: getattr(self, c.next_name)[j].item()
                    if c.shape is Shape.SCALAR
                    else getattr(self, c.next_name)[j]
                    for c in ARRAY_COLUMNS
                    if c.next_name
                }
                next_observation = self._observation(next_values, self.next_images, j, instruction)
            fields_of = {c.source: values[c.name] for c in ARRAY_COLUMNS if not c.source.startswith(_OBS)}
            out.append(
                Transition(
                    actor_id=self.actor_id,
                    observation=observation,
                    next_observation=next_observation,
                    **fields_of,
                )
            )
        return out

    @staticmethod
    def _observation(
        values: Mapping[str, Any], images: Mapping[str, npt.NDArray[np.uint8]], row: int, instruction: str
    ) -> Observation:
        """The observation of one row from its column values (a row's own or its next one's)."""
        observed = {
            _in_observation(c): values[c.name]
            for c in ARRAY_COLUMNS
            if c.name in values and c.source.startswith(_OBS)
        }
        return Observation(
            tick=values["tick"],
            images=MappingProxyType({c: v[row] for c, v in images.items()}),
            instruction=instruction,
            **observed,
        )


_OBS = "observation."


def _in_observation(column: Column) -> str:
    """Where an :class:`Observation` holds ``column`` (the tick is both the transition's and its
    observation's)."""
    return column.source.removeprefix(_OBS)


def _row_shape(column: Column, state: npt.NDArray[Any], action: npt.NDArray[Any]) -> tuple[int, ...]:
    """A column's row shape, the dimensions read off the given state and action columns."""
    dims = {Shape.STATE: state.shape[1:], Shape.ACTION: action.shape[1:], Shape.SCALAR: ()}
    return tuple(dims[column.shape])


def _stack(values: list[Any], column: Column, like: npt.NDArray[Any] | None = None) -> Any:
    """``values`` as one array of ``column``'s dtype; an empty list takes ``like``'s row shape."""
    if not values:
        return np.zeros((0, *(() if like is None else like.shape[1:])), column.dtype)
    return np.asarray(np.stack(values) if np.ndim(values[0]) else values).astype(column.dtype, copy=False)
