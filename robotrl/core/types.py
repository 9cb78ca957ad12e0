"""The values that cross every seam of robotrl.

Frozen dataclasses, so a value handed from one part to another cannot change under
the receiver. Arrays inside them are numpy arrays; the parts that build them make
them read-only where a value is shared (the wire decoder does, for instance).

Time is the integer control tick; the float timestamps are seconds for logs only
(see docs/architecture.md, "Virtual and wall-clock time").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import blake3
import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]
ImageArray = npt.NDArray[np.uint8]

OUTCOME_INFO_KEY = "outcome"
"""Step info on an episode's last step: how it ended, in a few words ("success", "timeout", "cube
pushed, never lifted"); environments that can tell set it, and `robotrl eval` counts them."""
OUTCOME_SUCCESS = "success"

_EMPTY_IMAGES: Mapping[str, ImageArray] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class EnvSpec:
    """What a policy and the actor need to know about an environment.

    Bounds are tuples so the spec is hashable and can be written to a config or a
    dataset's metadata unchanged.
    """

    name: str
    action_names: tuple[str, ...]
    action_low: tuple[float, ...]
    action_high: tuple[float, ...]
    state_names: tuple[str, ...]
    camera_shapes: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)
    control_hz: float = 30.0
    max_episode_ticks: int = 300
    instruction: str = ""

    def __post_init__(self) -> None:
        n = len(self.action_names)
        if len(self.action_low) != n or len(self.action_high) != n:
            raise ValueError(
                f"EnvSpec {self.name!r}: action_low/action_high need {n} entries "
                f"(one per action name), got {len(self.action_low)}/{len(self.action_high)}"
            )
        if any(lo > hi for lo, hi in zip(self.action_low, self.action_high, strict=True)):
            raise ValueError(f"EnvSpec {self.name!r}: action_low exceeds action_high")
        if self.control_hz <= 0:
            raise ValueError(f"EnvSpec {self.name!r}: control_hz must be > 0")
        for cam, shape in self.camera_shapes.items():
            if len(shape) != 3 or shape[2] != 3 or min(shape) <= 0:
                raise ValueError(f"EnvSpec {self.name!r}: camera {cam!r} shape {shape} is not HxWx3")

    @property
    def action_dim(self) -> int:
        return len(self.action_names)

    @property
    def state_dim(self) -> int:
        return len(self.state_names)

    @property
    def dt(self) -> float:
        """Seconds per control tick."""
        return 1.0 / self.control_hz

    def action_bounds(self) -> tuple[FloatArray, FloatArray]:
        return (
            np.asarray(self.action_low, dtype=np.float32),
            np.asarray(self.action_high, dtype=np.float32),
        )


@dataclass(frozen=True, slots=True)
class Observation:
    """What the robot (or sim) reported at one control tick."""

    tick: int
    state: FloatArray
    images: Mapping[str, ImageArray] = _EMPTY_IMAGES
    instruction: str = ""
    timestamp: float = 0.0


@dataclass(frozen=True, slots=True)
class ActionChunk:
    """H consecutive actions computed from one observation.

    ``obs_tick`` is the tick of the observation it was computed from, ``ready_tick``
    the tick it became available, ``start_tick`` the tick its first action is meant
    for. The delay is measured (ticks consumed while inferring), never guessed.
    ``prefix_len`` leading actions were given to the policy as a committed prefix.
    """

    chunk_id: int
    actions: FloatArray
    obs_tick: int
    ready_tick: int
    start_tick: int
    policy_version: int
    epoch: int = 0
    prefix_len: int = 0

    def __post_init__(self) -> None:
        if self.actions.ndim != 2:
            raise ValueError(f"ActionChunk.actions must be (H, action_dim), got {self.actions.shape}")
        if self.ready_tick < self.obs_tick:
            raise ValueError(
                f"ActionChunk {self.chunk_id}: ready_tick {self.ready_tick} before obs_tick {self.obs_tick}"
            )
        if not 0 <= self.prefix_len <= self.horizon:
            raise ValueError(f"ActionChunk {self.chunk_id}: prefix_len {self.prefix_len} out of range")

    @property
    def horizon(self) -> int:
        return int(self.actions.shape[0])

    @property
    def delay_ticks(self) -> int:
        """Ticks actually consumed while this chunk was computed."""
        return self.ready_tick - self.obs_tick

    @property
    def end_tick(self) -> int:
        """First tick after the last action of the chunk."""
        return self.start_tick + self.horizon

    def action_for(self, tick: int) -> FloatArray | None:
        """The action meant for ``tick``, or None when the chunk does not cover it."""
        i = tick - self.start_tick
        if 0 <= i < self.horizon:
            row: FloatArray = self.actions[i]
            return row
        return None


@dataclass(frozen=True, slots=True)
class Transition:
    """One control tick as executed, with every stamp the learner and audits need.

    ``action`` is what the robot did (after safety filtering, or the human's action
    during an intervention); ``proposed_action`` is what the policy asked for.
    ``next_observation`` is set only on the last transition of an episode, so the
    learner can bootstrap a truncated episode without doubling the stream's size.
    The fields are the typed view of :data:`robotrl.core.columns.COLUMNS`, where each
    column's dtype, shape and default are declared (tests/unit/test_columns.py checks
    that they agree).
    """

    actor_id: str
    episode_id: int
    tick: int
    observation: Observation
    action: FloatArray
    proposed_action: FloatArray
    reward: float
    terminated: bool
    truncated: bool
    intervention: bool
    chunk_id: int
    index_in_chunk: int
    policy_version: int
    delay_ticks: int
    obs_time: float = 0.0
    action_time: float = 0.0
    next_observation: Observation | None = None

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


@dataclass(frozen=True, slots=True)
class InferenceRequest:
    """Ask for one chunk from ``observation``; ``prefix`` holds the ``delay`` committed actions.

    ``epoch`` is the episode epoch the answer belongs to; ``seed`` makes the policy's
    sampling reproducible (virtual-time runs are bit-identical for a seed). ``continues``
    (pipelined inference): the id of an earlier request still being computed when this one
    was made; the committed actions are then that request's chunk from this observation's
    tick on (its last row held past its end), which the actor cannot know yet, so the
    backend that computed it fills them in and ``prefix`` is None.
    """

    request_id: int
    epoch: int
    observation: Observation
    prefix: FloatArray | None
    delay: int
    seed: int
    continues: int = -1


@dataclass(frozen=True, slots=True)
class InferenceReply:
    """The answer to one :class:`InferenceRequest`: a chunk, or the error that prevented it."""

    request_id: int
    epoch: int
    obs_tick: int
    actions: FloatArray | None
    policy_version: int
    infer_s: float
    error: str | None = None


class WeightsHasher:
    """Incremental :func:`weights_digest`: feed tensors in name order as they arrive.

    Lets a receiver hash the pieces of a large update while the next ones are still
    on the wire.
    """

    def __init__(self, threads: int | None = None) -> None:
        """``threads`` None uses every core; a receiver beside a control loop passes 1."""
        self._h = blake3.blake3(max_threads=blake3.blake3.AUTO if threads is None else threads)
        self._last: str | None = None

    def update(self, name: str, tensor: npt.NDArray[np.generic]) -> None:
        if self._last is not None and name <= self._last:
            raise ValueError(f"tensors must come in name order: {name!r} after {self._last!r}")
        self._last = name
        arr = np.ascontiguousarray(tensor)
        self._h.update(name.encode())
        self._h.update(b"\0")
        self._h.update(arr.dtype.str.encode())
        self._h.update(repr(tuple(arr.shape)).encode())
        self._h.update(memoryview(arr).cast("B"))

    def hexdigest(self) -> str:
        return str(self._h.hexdigest())


def weights_digest(tensors: Mapping[str, npt.NDArray[np.generic]]) -> str:
    """BLAKE3 over names, dtypes, shapes and bytes, in name order.

    Covers the layout as well as the values, so a reshaped or re-typed tensor with
    the same bytes does not pass as the same update. BLAKE3 (multi-threaded, about
    3 GB/s here) rather than SHA-256 (about 0.35 GB/s) because both ends hash every
    hot-swapped update: 200 MB of weights would cost over half a second per side.
    """
    h = WeightsHasher()
    for name in sorted(tensors):
        h.update(name, tensors[name])
    return h.hexdigest()


@dataclass(frozen=True, slots=True)
class WeightUpdate:
    """A versioned set of policy tensors, learner to actors.

    ``subset`` is ``"full"`` or ``"trainable"`` (only the tensors the learner trains,
    e.g. a VLA's action head). ``digest`` is :func:`weights_digest` of ``tensors`` ("" for an
    update mapped from shared memory on the learner's host, which crossed no wire).
    ``session`` names the publisher that numbered it (a random id per learner process; ""
    for updates made in-process): versions are ordered within a session only
    (:mod:`robotrl.core.sessions`).
    """

    policy_version: int
    """The version of the policy these tensors are; every transition it acts in carries it."""
    tensors: Mapping[str, npt.NDArray[np.generic]]
    digest: str
    subset: str = "full"
    created_time: float = 0.0
    session: str = ""

    def __post_init__(self) -> None:
        if self.policy_version < 0:
            raise ValueError(f"WeightUpdate.policy_version must be >= 0, got {self.policy_version}")
        if self.subset not in ("full", "trainable"):
            raise ValueError(f"WeightUpdate.subset must be 'full' or 'trainable', got {self.subset!r}")

    @classmethod
    def build(
        cls,
        policy_version: int,
        tensors: Mapping[str, npt.NDArray[np.generic]],
        subset: str = "full",
        created_time: float = 0.0,
    ) -> WeightUpdate:
        """An update whose digest is computed from ``tensors``."""
        return cls(policy_version, tensors, weights_digest(tensors), subset, created_time)

    def digest_matches(self) -> bool:
        return weights_digest(self.tensors) == self.digest

    @property
    def nbytes(self) -> int:
        return sum(int(t.nbytes) for t in self.tensors.values())
