"""Every seam of robotrl, and nothing else.

A part depends on these Protocols, never on another part's concrete class, so a
reader learns the architecture here: the actor drives a :class:`RobotEnv` with chunks
from a :class:`ChunkPolicy`, timed by a :class:`LatencyModel` in virtual time; its
transitions leave through a :class:`Sender` and reach the learner's
:class:`BatchReceiver`, which fills a :class:`ReplayBuffer` that an :class:`Algorithm`
learns from; weights travel back the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt

from robotrl.core.batch import TransitionBatch
from robotrl.core.types import (
    ActionChunk,
    EnvSpec,
    FloatArray,
    InferenceReply,
    InferenceRequest,
    Observation,
    WeightUpdate,
)

T_co = TypeVar("T_co", covariant=True)
T_contra = TypeVar("T_contra", contravariant=True)


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one control step of a :class:`RobotEnv` returns."""

    observation: Observation
    reward: float
    terminated: bool
    truncated: bool
    info: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class RobotEnv(Protocol):
    """A robot or simulation stepped at the control rate, one absolute action per tick."""

    @property
    def spec(self) -> EnvSpec: ...

    def reset(self, seed: int | None = None) -> Observation:
        """Start an episode; the same seed gives the same episode."""
        ...

    def step(self, action: FloatArray) -> StepResult:
        """Apply ``action`` for one control tick and observe."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class ChunkPolicy(Protocol):
    """A policy that maps an observation to H future actions.

    ``prefix`` holds the committed actions that will run while the policy infers
    (real-time chunking); the returned chunk starts with them unchanged, and the
    policy chooses only the continuation. ``delay`` is the prefix length.
    """

    @property
    def horizon(self) -> int: ...

    @property
    def action_dim(self) -> int: ...

    def infer(self, observation: Observation, prefix: FloatArray | None, delay: int) -> FloatArray:
        """Return an (horizon, action_dim) chunk whose first ``delay`` rows equal ``prefix``."""
        ...

    def per_sample_loss(self, batch: Mapping[str, Any]) -> Any:
        """Supervised loss per sample: a (B,) tensor, so a learner can weight samples.

        ``batch`` holds torch tensors on the policy's device, keyed as in
        :mod:`robotrl.core.keys`: ``keys.STATE`` (B, S) float32, ``keys.IMAGE_PREFIX``
        + camera (B, H, W, 3) uint8, ``keys.TASK`` a list of B strings, ``keys.ACTION``
        (B, H, A) the executed chunk, ``keys.PREFIX_LEN`` (B,) int64 and
        ``keys.ACTION_MASK`` (B, H) bool. Rows before the prefix length are given to
        the policy as its committed prefix and excluded from the loss, as are
        masked rows.
        """
        ...

    def trainable_tensors(self) -> Mapping[str, npt.NDArray[np.generic]]:
        """The tensors a learner trains and ships (for a VLA, e.g. its action head)."""
        ...

    def load_weights(
        self, tensors: Mapping[str, npt.NDArray[np.generic]], *, zero_copy: bool = False
    ) -> None:
        """Copy ``tensors`` into the policy in place; raise on a name, shape or dtype mismatch.

        ``zero_copy``: the policy may use the arrays themselves as its weights (read, never
        written) instead of copying them; for updates nobody else holds, such as a verified
        update in an actor's spare slot. Weights on a GPU are copied regardless.
        """
        ...


@runtime_checkable
class LatencyModel(Protocol):
    """How long one inference takes, for virtual-time simulation."""

    def sample_seconds(self, rng: np.random.Generator) -> float:
        """Draw the duration of one inference, in seconds, from ``rng`` only."""
        ...


@runtime_checkable
class InferenceBackend(Protocol):
    """Where the policy runs for the actor: in this process, or in a worker process.

    ``submit`` never waits for the inference in a worker backend; the control loop
    collects the reply with ``poll`` (never blocks) or, in virtual time, ``wait``.
    """

    def submit(self, request: InferenceRequest) -> None: ...

    def poll(self) -> InferenceReply | None:
        """A finished reply, or None at once."""
        ...

    def wait(self, timeout_s: float) -> InferenceReply | None:
        """The next reply, waiting at most ``timeout_s``."""
        ...

    def wait_for_news(self, timeout_s: float) -> bool:
        """Wait at most ``timeout_s`` for a reply or an announcement of new weights to read;
        True as soon as one is there (a backend that cannot receive while the loop sleeps, the
        in-process one, answers at once whether a reply is queued)."""
        ...

    def failure(self) -> str | None:
        """Why the backend can no longer serve (crashed, error budget spent), or None."""
        ...

    def newest_version(self) -> int:
        """The newest policy version the backend can infer with (loaded, active or staged);
        above the version the loop is running, a fresh chunk would use newer weights."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class LoopObserver(Protocol):
    """Watches the control loop (visualisation, audits); called inside the tick, so cheap."""

    def on_tick(
        self,
        episode_id: int,
        observation: Observation,
        executed: FloatArray,
        proposed: FloatArray,
        lateness_s: float,
        starved: bool,
    ) -> None: ...

    def on_chunk(self, episode_id: int, chunk: ActionChunk) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class WeightSource(Protocol):
    """Where an inference backend finds new weights; polled between inferences."""

    def latest(self) -> WeightUpdate | None:
        """The newest complete, verified update not yet returned, or None at once."""
        ...

    def recv(self, timeout_s: float) -> WeightUpdate | None:
        """As :meth:`latest`, waiting up to ``timeout_s`` for one to arrive."""
        ...

    def publisher_alive(self) -> bool:
        """Whether the publisher was heard from lately (it may not have published yet)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Sender(Protocol[T_contra]):
    """The sending end of a link. ``send`` never blocks the caller on the network."""

    def send(self, item: T_contra) -> bool:
        """Queue ``item`` for delivery; False when it was refused (queue and spool full)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Receiver(Protocol[T_co]):
    """The receiving end of a link."""

    def recv(self, timeout_s: float) -> T_co | None:
        """The next item, or None when none arrived within ``timeout_s``."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class StreamBatch(Protocol):
    """A transition batch as a transition link hands it out: with its place in its actor's stream."""

    @property
    def actor_id(self) -> str: ...

    @property
    def stream(self) -> str:
        """One incarnation of one actor; sequence numbers count from 0 within it."""
        ...

    @property
    def seq(self) -> int: ...

    @property
    def batch(self) -> TransitionBatch: ...


@runtime_checkable
class StreamLedger(Protocol):
    """What a transition link has received of every stream, as a checkpoint stores it."""

    def to_json(self) -> dict[str, Any]: ...


@runtime_checkable
class BatchReceiver(Protocol):
    """The learner's end of the transition stream.

    ``recv_item`` acknowledges the batch it handed out before, so a batch the learner
    journals or stores before asking for the next one is never lost to a crash.
    """

    @property
    def ledger(self) -> StreamLedger | None:
        """Every stream's sequence numbers received (checkpointed beside the buffers); None
        for a link whose streams do not outlive the process."""
        ...

    def recv_item(self, timeout_s: float) -> StreamBatch | None:
        """The next new batch and its place, or None when none arrived within ``timeout_s``."""
        ...

    def hand_back(self) -> None:
        """Do not acknowledge the batch handed out last (the learner could not journal it):
        it comes again later."""
        ...

    def commit(self) -> None:
        """Acknowledge the batch handed out last now (the learner stored it and will ask for no
        other: it is stopping), instead of at the next ``recv_item``."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class ReplayBuffer(Protocol):
    """Stores transitions and samples chunk-level training batches; add and sample may run concurrently.

    ``add`` takes a whole :class:`~robotrl.core.batch.TransitionBatch` (one actor's rows,
    as the transport delivers them) and raises ``ValueError`` for one that does not fit
    the buffer, writing none of it. ``sample`` returns the training batch keys of
    :meth:`ChunkPolicy.per_sample_loss` plus the critic's (reward, discount, done,
    ``next.``-prefixed next observation, policy_version); ``min_version`` drops
    samples of older policies (the lag cap). ``__len__`` counts samples ready to draw.
    """

    def add(self, batch: TransitionBatch) -> object: ...

    def sample(
        self, batch_size: int, rng: np.random.Generator, min_version: int | None = None
    ) -> Mapping[str, Any]: ...

    def __len__(self) -> int: ...


@runtime_checkable
class Algorithm(Protocol):
    """A learning rule the learner loop drives without knowing which one it is.

    The unit of work is an update group (e.g. RAPI's critic updates then actor
    updates); the algorithm pulls each update's batch from ``next_batch``. The loop
    publishes :meth:`policy_weights` after every group whose metrics report
    ``actor_updates > 0``.
    """

    def update_group(self, next_batch: Callable[[], Mapping[str, Any]]) -> Mapping[str, float]:
        """One update group; returns scalar metrics, ``actor_updates`` among them."""
        ...

    def policy_weights(self) -> Mapping[str, npt.NDArray[np.generic]]:
        """The policy tensors to publish to actors after an update group."""
        ...

    def set_progress(self, fraction: float) -> None:
        """How far the run is through its update-group budget (0 at the start, 1 at the end),
        told before every group when the budget is known: learning-rate schedules read it."""
        ...

    def state_dict(self) -> Mapping[str, Any]:
        """Everything needed to resume: networks, optimisers, counters."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...
