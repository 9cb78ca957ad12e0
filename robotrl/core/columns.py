"""The columns of a transition, declared once.

A transition crosses four representations: the per-tick :class:`~robotrl.core.types.Transition`,
the column-wise :class:`~robotrl.core.batch.TransitionBatch` (what the wire carries), the
learner's replay rows, and a LeRobotDataset on disk. Each column is declared here with its
dtype, its shape rule and its default (the value of a row no source fills: a demonstration
has no policy version, a next-observation row in replay no action); the batch, the wire
message, the replay storage, the dataset features and the demonstration loader are derived
from :data:`COLUMNS`. Adding a column is one entry here, plus the typed field it gets on
``Transition`` and ``TransitionBatch`` (tests/unit/test_columns.py checks they agree).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from operator import attrgetter
from typing import Any, Final, Protocol

import numpy as np

from robotrl.core import keys
from robotrl.core.types import Transition


class Shape(Enum):
    """How many values one row of a column holds."""

    SCALAR = "scalar"
    """One value."""
    STATE = "state"
    """One per state dimension."""
    ACTION = "action"
    """One per action dimension."""
    IMAGE = "image"
    """One H x W x 3 image per camera: the column is a mapping camera -> (N, H, W, 3)."""
    TEXT = "text"
    """One string; a batch stores each distinct string once and an index per row."""


class Dims(Protocol):
    """The sizes a shape rule needs (an EnvSpec or a ReplaySpec has them)."""

    @property
    def state_dim(self) -> int: ...

    @property
    def action_dim(self) -> int: ...


@dataclass(frozen=True)
class Column:
    """One transition column.

    ``source`` is where a :class:`~robotrl.core.types.Transition` holds the value
    (``observation.state``). ``feature`` is the LeRobotDataset feature it is recorded
    as (a prefix for images); None when a dataset does not store it under its own name.
    ``next_name`` is the batch field of the next observation's value, for the columns an
    observation carries. ``finite`` columns refuse NaN and infinity (wire and replay).
    """

    name: str
    dtype: np.dtype[np.generic]
    shape: Shape
    default: bool | int | float | str
    source: str
    feature: str | None
    next_name: str | None = None
    finite: bool = False

    def row_shape(self, dims: Dims) -> tuple[int, ...]:
        """The shape of one row's value (images: per camera, see :attr:`Shape.IMAGE`)."""
        if self.shape is Shape.STATE:
            return (dims.state_dim,)
        if self.shape is Shape.ACTION:
            return (dims.action_dim,)
        if self.shape is Shape.SCALAR:
            return ()
        raise ValueError(f"column {self.name!r}: a {self.shape.value} column has no single row shape")

    def of(self, transition: Transition) -> Any:
        """This column's value in ``transition``."""
        return attrgetter(self.source)(transition)

    @property
    def is_array(self) -> bool:
        """Stored as one array of N rows (not a per-camera mapping or a string table)."""
        return self.shape in (Shape.SCALAR, Shape.STATE, Shape.ACTION)


def _col(
    name: str,
    dtype: type[np.generic],
    shape: Shape,
    default: bool | int | float | str,
    *,
    source: str | None = None,
    feature: str | None = None,
    next_name: str | None = None,
    finite: bool = False,
) -> Column:
    return Column(name, np.dtype(dtype), shape, default, source or name, feature, next_name, finite)


COLUMNS: Final[tuple[Column, ...]] = (
    _col("state", np.float32, Shape.STATE, 0.0, source="observation.state", feature=keys.STATE,
         next_name="next_state", finite=True),
    _col("images", np.uint8, Shape.IMAGE, 0, source="observation.images", feature=keys.IMAGE_PREFIX,
         next_name="next_images"),
    _col("instruction", np.str_, Shape.TEXT, "", source="observation.instruction", feature=keys.TASK),
    _col("obs_timestamp", np.float64, Shape.SCALAR, 0.0, source="observation.timestamp",
         feature="obs_timestamp", next_name="next_timestamp"),
    _col("tick", np.int64, Shape.SCALAR, 0, feature="tick", next_name="next_tick"),
    _col("episode_id", np.int64, Shape.SCALAR, 0, feature="actor_episode"),
    _col("action", np.float32, Shape.ACTION, 0.0, feature=keys.ACTION, finite=True),
    _col("proposed_action", np.float32, Shape.ACTION, 0.0, feature="proposed_action", finite=True),
    _col("reward", np.float32, Shape.SCALAR, 0.0, feature="next.reward", finite=True),
    # Recorded as lerobot's next.success: robotrl's recordings mark success by termination.
    _col("terminated", np.bool_, Shape.SCALAR, False, feature="next.success"),
    # Recorded inside lerobot's next.done (terminated or truncated), see robotrl.data.
    _col("truncated", np.bool_, Shape.SCALAR, False),
    _col("intervention", np.bool_, Shape.SCALAR, False, feature="intervention"),
    _col("chunk_id", np.int64, Shape.SCALAR, -1, feature="chunk_id"),
    _col("index_in_chunk", np.int64, Shape.SCALAR, -1, feature="index_in_chunk"),
    _col("policy_version", np.int64, Shape.SCALAR, -1, feature="policy_version"),
    _col("delay_ticks", np.int64, Shape.SCALAR, -1, feature="delay_ticks"),
    _col("obs_time", np.float64, Shape.SCALAR, 0.0, feature="obs_time"),
    _col("action_time", np.float64, Shape.SCALAR, 0.0, feature="action_time"),
)  # fmt: skip
"""Every transition column. The defaults say what a missing value means: -1 is "no chunk,
no policy (a demonstration or a person), no measured delay"."""

BY_NAME: Final = {c.name: c for c in COLUMNS}
ARRAY_COLUMNS: Final = tuple(c for c in COLUMNS if c.is_array)
"""The columns a batch holds as one array of N rows each."""
IMAGES: Final = BY_NAME["images"]
FINITE: Final = tuple(c.name for c in ARRAY_COLUMNS if c.finite) + tuple(
    c.next_name for c in ARRAY_COLUMNS if c.finite and c.next_name
)
"""Batch fields that must hold no NaN or infinity (next-observation fields included)."""
