"""Chunk-level replay: tick transitions in, (state, executed chunk, return, next state) samples out.

Storage is per tick (one row per executed action) in a fixed-capacity ring; camera
images live in memory-mapped files so a large buffer does not sit in RAM. A chunk
sample is built from rows, never stored twice:

- **Chunk starts: every tick.** Each executed tick ``t`` of an episode starts one
  sample: the state at ``t``, the executed actions of ticks ``t .. t+H-1`` (what the
  robot did: committed prefix and interventions included), the discounted reward
  sum over them, the observation ``H`` ticks later as next state, and ``done``. Every
  tick (not only the actor's own chunk starts) gives H times more critic data, and
  every window is a real executed chunk. ``prefix_len`` is the delay of the chunk that
  produced the start tick's action, as the actor measured it: the policy learns to
  continue ``d`` committed actions, exactly what it is asked to do at inference with
  that delay. Rows without a measured delay (demonstrations) draw ``d`` uniformly from
  ``[0, max_delay]`` (training-time real-time chunking).
- **The actor learns from chunk starts only (``actor_sample``).** An online action at
  tick ``t`` came from a chunk computed from an older observation (``index_in_chunk``
  ticks back, up to a horizon), so a window from ``t`` pairs the state at ``t`` with a
  stitched plan that no policy computed from that state: the policy that produced them
  fits its own every-tick windows twice as badly as its chunk-start windows. The critic
  uses every window (a return is a return); the actor only windows that start where a
  chunk was observed, with that chunk's delay as ``prefix_len``, and every window of an
  expert: a demonstration's, or one that starts on a tick a person drove (an intervention),
  which teaches the rows the person drove, with ``prefix_len`` drawn as for demonstrations.
  Either expert acted on the current state at every tick. Starved ticks start no actor sample.
- **Never across an episode.** Rows are linked per actor and episode; a new episode
  id or a gap in ticks closes the open one. At an episode's end the last starts get
  shorter chunks (padded with their last action, as pretraining pads them, and
  ``action_mask`` False) whose next state is the episode's
  ``next_observation`` (stored as an extra row that never starts a sample); a
  truncated episode without one ends its chunks one tick early and bootstraps from
  the last observation instead. ``discount`` is ``gamma ** m`` for ``m`` real actions.
- **A takeover costs the policy (RLIF).** With ``intervention_penalty`` p > 0, the last tick
  the policy drove before a person took over earns ``reward - p``: the windows that led
  to the takeover (and their returns to go) say it was going wrong, so an advantage-weighted
  actor stops imitating them, where BC imitates them as much as anything else.
- **Returns to go once an episode ends.** When an episode ends, each of its rows
  learns its discounted reward sum to the episode's end (``return_to_go``; a timeout
  counts what was earned, with no bootstrap). Until then, and for an episode cut by a
  gap, it is NaN. This is the Monte-Carlo signal of the ``mc`` advantage
  (``learner.rapi.advantage``): on sparse success rewards a near-deterministic policy gives
  the critic's Q - V almost nothing to tell apart, while the outcome does.
- **Ready only when complete.** A start becomes sampleable once its next state has
  arrived (or its episode ended), so a sample never contains a row still to come.
- **Thread safety.** One lock around add and sample; a sample is gathered (copied)
  under it, so concurrent ingest never yields a torn sample. The ring overwrites the
  oldest rows first, and every row a sample refers to is newer than its start, so a
  start is always overwritten (and unreadied) before anything it refers to.
- **Bad input is refused whole.** A batch whose shapes, cameras or values do not
  match the spec raises :class:`ReplayError` and is counted; nothing of it is written.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import weakref
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from robotrl.core.batch import TransitionBatch
from robotrl.core.types import (
    ACTION_KEY,
    ACTION_MASK_KEY,
    IMAGE_KEY_PREFIX,
    PREFIX_LEN_KEY,
    STATE_KEY,
    TASK_KEY,
)

NEXT_PREFIX = "next."
"""Next-state keys are the observation keys with this prefix: ``next.observation.state``."""
ACTOR_SAMPLE_KEY = "actor_sample"
"""bool (B,): whether the actor may learn from the sample (a chunk start, a demonstration window,
or a window that starts on a tick a person drove)."""
POLICY_MASK_KEY = "policy_mask"
"""bool (B, H): the rows the actor may learn from: a chunk start's own chunk (the rows it
produced, after its committed prefix), every real row of a demonstration window, the rows a
person drove in a window that starts on one."""
REWARD_KEY = "reward"
"""float32 (B,): discounted reward sum over the chunk's real actions."""
DISCOUNT_KEY = "discount"
"""float32 (B,): ``gamma ** m`` for the chunk's ``m`` real actions (the bootstrap factor)."""
DONE_KEY = "done"
"""bool (B,): the episode terminated within the chunk (no bootstrap)."""
VERSION_KEY = "policy_version"
"""int64 (B,): policy version that produced the start tick's action (-1: not a policy's)."""
INTERVENTION_KEY = "intervention"
"""bool (B,): a human intervened on some real action of the chunk."""
RETURN_TO_GO_KEY = "return_to_go"
"""float32 (B,): discounted reward sum from the start tick to its episode's end; NaN while the
episode is open (or if it was cut before its end)."""

Batch = dict[str, Any]


def padded_rows(rows: npt.NDArray[np.int64], starts: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The storage rows of each window (B, H), a missing row (-1, past the episode's end)
    replaced by the window's last real one: the padding pretraining uses (policy.data).

    Padding rows are outside the loss (``action_mask``), but the policy attends to every
    row of its input; zeros there were actions the robot never took, and the pretrained
    policy's loss on demonstration windows near an episode's end was five times its own.
    """
    present = rows >= 0
    last = np.maximum.accumulate(np.where(present, np.arange(rows.shape[1]), 0), axis=1)
    filled = np.take_along_axis(rows, last, axis=1)
    return np.where(filled >= 0, filled, starts[:, None])


class ReplayError(ValueError):
    """A batch the buffer refuses: it does not match the buffer's spec."""


@dataclass(frozen=True)
class ReplaySpec:
    """What every stored row looks like, and how rows become chunk samples."""

    state_dim: int
    action_dim: int
    horizon: int
    cameras: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)
    gamma: float = 0.99
    max_delay: int = 0
    """Rows without a measured delay draw ``prefix_len`` from ``[0, max_delay]``."""
    intervention_penalty: float = 0.0
    """Subtracted from the reward of the policy's last tick before a person takes over (RLIF)."""

    def __post_init__(self) -> None:
        if self.state_dim <= 0 or self.action_dim <= 0 or self.horizon <= 0:
            raise ValueError(f"ReplaySpec: dims and horizon must be > 0, got {self}")
        if not 0 <= self.max_delay < self.horizon:
            raise ValueError(f"ReplaySpec: max_delay must be in [0, horizon), got {self.max_delay}")
        if self.intervention_penalty < 0:
            raise ValueError(
                f"ReplaySpec: the intervention penalty must be >= 0, got {self.intervention_penalty}"
            )


@dataclass
class _Cursor:
    """The open episode of one stream: starts still waiting for their next state."""

    episode_id: int
    last_tick: int
    pending: deque[tuple[int, int]]  # (position, serial), oldest first, at most H
    rows: list[tuple[int, int]] = field(default_factory=list)  # every row so far: returns to go


@dataclass(frozen=True)
class Added:
    """Where :meth:`ChunkReplay.add` wrote a batch: per row and per next observation."""

    positions: npt.NDArray[np.int64]
    serials: npt.NDArray[np.int64]
    next_positions: npt.NDArray[np.int64]
    next_serials: npt.NDArray[np.int64]


class ChunkReplay:
    """A ring of tick rows that samples chunk-level training batches (see the module doc)."""

    def __init__(
        self,
        spec: ReplaySpec,
        capacity: int,
        storage_dir: str | Path | None = None,
        name: str = "replay",
    ) -> None:
        if capacity < 2 * spec.horizon:
            raise ValueError(f"{name}: capacity {capacity} must be at least 2 * horizon ({2 * spec.horizon})")
        self.spec, self.capacity, self.name = spec, capacity, name
        n, h = capacity, spec.horizon
        self._state = np.zeros((n, spec.state_dim), np.float32)
        self._action = np.zeros((n, spec.action_dim), np.float32)
        self._reward = np.zeros(n, np.float32)
        self._terminated = np.zeros(n, np.bool_)
        self._truncated = np.zeros(n, np.bool_)
        self._intervention = np.zeros(n, np.bool_)
        self._episode = np.zeros(n, np.int64)
        self._tick = np.zeros(n, np.int64)
        self._chunk_id = np.zeros(n, np.int64)
        self._index_in_chunk = np.zeros(n, np.int64)
        self._version = np.full(n, -1, np.int64)
        self._delay = np.full(n, -1, np.int64)
        self._instruction = np.zeros(n, np.int32)
        self._serial = np.full(n, -1, np.int64)
        # Chunk samples, one per start row.
        self._ready = np.zeros(n, np.bool_)
        self._chunk_rows = np.full((n, h), -1, np.int32)
        self._next_row = np.zeros(n, np.int32)
        self._return = np.zeros(n, np.float32)
        self._return_to_go = np.full(n, np.nan, np.float32)
        self._discount = np.zeros(n, np.float32)
        self._done = np.zeros(n, np.bool_)
        self._real = np.zeros(n, np.int32)
        self._chunk_start = np.zeros(n, np.bool_)  # a chunk was computed from this row's observation
        self._start_delay = np.zeros(n, np.int64)  # ... with this delay
        self._start_chunk = np.full(n, -1, np.int64)  # ... and this chunk id

        self._dir = Path(tempfile.mkdtemp(prefix=f"robotrl-{name}-") if storage_dir is None else storage_dir)
        self._dir.mkdir(parents=True, exist_ok=True)
        # A folder this buffer made goes with it, closed or not (a dropped buffer must not fill /tmp).
        self._remove_dir = (
            weakref.finalize(self, shutil.rmtree, self._dir, True) if storage_dir is None else None
        )
        self._images: dict[str, np.memmap[Any, np.dtype[np.uint8]]] = {
            cam: np.memmap(self._dir / f"{name}-{cam}.u8", np.uint8, "w+", shape=(n, *shape))
            for cam, shape in spec.cameras.items()
        }
        self._instructions: list[str] = []
        self._instruction_ids: dict[str, int] = {}
        self._open: dict[str, _Cursor] = {}
        self._cursor = 0
        self._next_serial = 0
        self._discounts = spec.gamma ** np.arange(h + 1, dtype=np.float64)
        self._lock = threading.Lock()
        self.rows_added = 0
        self.refused_batches = 0
        self.refused_rows = 0
        self.dropped_starts = 0
        """Starts that never got a next state (episode cut by a gap or overwritten)."""

    # ----------------------------------------------------------------- ingest

    def check(self, batch: TransitionBatch) -> None:
        """Raise :class:`ReplayError` naming the first mismatch between ``batch`` and the spec."""
        s, where = self.spec, f"{self.name} replay refused a batch of {len(batch)} from {batch.actor_id!r}"
        if batch.state.shape[1] != s.state_dim:
            raise ReplayError(
                f"{where}: state has {batch.state.shape[1]} columns, the spec has {s.state_dim}"
            )
        if batch.action.shape[1] != s.action_dim:
            raise ReplayError(
                f"{where}: action has {batch.action.shape[1]} columns, the spec has {s.action_dim}"
            )
        if set(batch.images) != set(s.cameras):
            raise ReplayError(f"{where}: cameras {sorted(batch.images)}, the spec has {sorted(s.cameras)}")
        for cam, shape in s.cameras.items():
            if batch.images[cam].shape[1:] != tuple(shape):
                raise ReplayError(
                    f"{where}: camera {cam!r} is {batch.images[cam].shape[1:]}, the spec has {tuple(shape)}"
                )
        for col in ("state", "action", "reward", "next_state"):
            if not np.isfinite(getattr(batch, col)).all():
                raise ReplayError(f"{where}: {col} holds NaN or infinity")

    def add(self, batch: TransitionBatch) -> Added:
        """Store ``batch`` (one actor, rows in tick order); raise :class:`ReplayError` if it is refused."""
        return self._add(batch, batch.actor_id, None)

    def _add(self, batch: TransitionBatch, stream: str, positions: npt.NDArray[np.int64] | None) -> Added:
        try:
            self.check(batch)
        except ReplayError:
            with self._lock:
                self.refused_batches += 1
                self.refused_rows += len(batch)
            raise
        n, m = len(batch), len(batch.next_rows)
        if (n + m > self.capacity // 2) if positions is None else (len(positions) != n + m):
            with self._lock:
                self.refused_batches += 1
                self.refused_rows += n
            raise ReplayError(
                f"{self.name} replay refused a batch of {n} rows from {batch.actor_id!r}: "
                f"more than half its capacity ({self.capacity}) or than the slot given"
            )
        # Write order: each row, and right after an episode's last row its next observation.
        row_slot = np.arange(n) + np.searchsorted(batch.next_rows, np.arange(n), side="left")
        next_slot = batch.next_rows + np.arange(m) + 1
        with self._lock:
            if positions is None:
                positions = (self._cursor + np.arange(n + m)) % self.capacity
                self._cursor = int((self._cursor + n + m) % self.capacity)
            serials = self._next_serial + np.arange(n + m)
            self._next_serial += n + m
            self._ready[positions] = False
            self._chunk_start[positions] = False
            self._return_to_go[positions] = np.nan
            self._serial[positions] = serials
            rows, nexts = positions[row_slot], positions[next_slot]
            instr = np.array([self._instruction_id(t) for t in batch.instructions], np.int32)
            self._write(rows, batch, instr[batch.instruction_index])
            self._write_next(nexts, batch, instr[batch.instruction_index[batch.next_rows]])
            self._link(
                batch,
                stream,
                rows,
                serials[row_slot],
                dict(zip(batch.next_rows.tolist(), nexts.tolist(), strict=True)),
            )
            self.rows_added += n
            return Added(rows, serials[row_slot], nexts, serials[next_slot])

    def _instruction_id(self, text: str) -> int:
        if text not in self._instruction_ids:
            self._instruction_ids[text] = len(self._instructions)
            self._instructions.append(text)
        return self._instruction_ids[text]

    def _write(self, rows: npt.NDArray[np.int64], b: TransitionBatch, instr: npt.NDArray[np.int32]) -> None:
        self._state[rows] = b.state
        self._action[rows] = b.action
        self._reward[rows] = b.reward
        self._terminated[rows] = b.terminated
        self._truncated[rows] = b.truncated
        self._intervention[rows] = b.intervention
        self._episode[rows] = b.episode_id
        self._tick[rows] = b.tick
        self._chunk_id[rows] = b.chunk_id
        self._index_in_chunk[rows] = b.index_in_chunk
        self._version[rows] = b.policy_version
        self._delay[rows] = b.delay_ticks
        self._instruction[rows] = instr
        for cam, mem in self._images.items():
            mem[rows] = b.images[cam]

    def _write_next(
        self, rows: npt.NDArray[np.int64], b: TransitionBatch, instr: npt.NDArray[np.int32]
    ) -> None:
        """Next observations are rows that hold an observation and nothing else."""
        self._state[rows] = b.next_state
        self._action[rows] = 0.0
        self._reward[rows] = 0.0
        self._terminated[rows] = False
        self._truncated[rows] = False
        self._intervention[rows] = False
        self._episode[rows] = b.episode_id[b.next_rows]
        self._tick[rows] = b.next_tick
        self._version[rows] = -1
        self._delay[rows] = -1
        self._instruction[rows] = instr
        for cam, mem in self._images.items():
            mem[rows] = b.next_images[cam]

    def _link(
        self,
        b: TransitionBatch,
        stream: str,
        rows: npt.NDArray[np.int64],
        serials: npt.NDArray[np.int64],
        next_of: dict[int, int],
    ) -> None:
        """Per row: extend the stream's open episode and ready every start whose chunk is complete."""
        h = self.spec.horizon
        episodes, ticks = b.episode_id.tolist(), b.tick.tolist()
        terminated, truncated = b.terminated.tolist(), b.truncated.tolist()
        chunk_ids, in_chunk, delays = b.chunk_id.tolist(), b.index_in_chunk.tolist(), b.delay_ticks.tolist()
        intervened = b.intervention.tolist()
        for i, (pos, serial) in enumerate(zip(rows.tolist(), serials.tolist(), strict=True)):
            cur = self._open.get(stream)
            if cur is None or cur.episode_id != episodes[i] or ticks[i] != cur.last_tick + 1:
                if cur is not None:
                    self.dropped_starts += len(cur.pending)
                cur = self._open[stream] = _Cursor(episodes[i], ticks[i], deque())
            cur.last_tick = ticks[i]
            if intervened[i]:
                self._penalize_takeover(cur)  # before any window ending at the previous row is readied
            pending = cur.pending
            if pending and self._serial[pending[0][0]] != pending[0][1]:
                # The ring overwrote this episode's older rows: its open starts are gone.
                self.dropped_starts += len(pending)
                pending.clear()
            if len(pending) == h:
                start = pending.popleft()[0]
                self._ready_start(start, [start, *(p for p, _ in pending)], pos, done=False)
            pending.append((pos, serial))
            cur.rows.append((pos, serial))
            if chunk_ids[i] >= 0 and 0 <= in_chunk[i] < len(pending):
                # pending holds consecutive ticks, this one last: the chunk's observation row.
                origin = pending[-1 - in_chunk[i]][0]
                if not self._chunk_start[origin]:
                    self._chunk_start[origin] = True
                    self._start_delay[origin] = delays[i]
                    self._start_chunk[origin] = chunk_ids[i]
            if not (terminated[i] or truncated[i]):
                continue
            chunk = [p for p, _ in pending]
            nxt = next_of.get(i)
            if nxt is not None or terminated[i]:
                for k, start in enumerate(chunk):
                    self._ready_start(start, chunk[k:], nxt if nxt is not None else start, terminated[i])
            else:  # truncated without a next observation: bootstrap from the last one
                self.dropped_starts += 1
                for k, start in enumerate(chunk[:-1]):
                    self._ready_start(start, chunk[k:-1], chunk[-1], done=False)
            self._set_returns_to_go(cur.rows)
            del self._open[stream]

    def _penalize_takeover(self, cur: _Cursor) -> None:
        """A person took over at this row: the policy's last row before it pays the penalty."""
        if not self.spec.intervention_penalty or not cur.rows:
            return
        prev, serial = cur.rows[-1]
        if self._serial[prev] == serial and not self._intervention[prev]:
            self._reward[prev] -= self.spec.intervention_penalty

    def _set_returns_to_go(self, rows: Sequence[tuple[int, int]]) -> None:
        """An ended episode's discounted reward sums, from its last row back (to the oldest not
        overwritten: a row's sum needs only the rows after it)."""
        gamma, to_go = self.spec.gamma, 0.0
        for pos, serial in reversed(rows):
            if self._serial[pos] != serial:
                break
            to_go = float(self._reward[pos]) + gamma * to_go
            self._return_to_go[pos] = to_go

    def _ready_start(self, start: int, chunk: Sequence[int], nxt: int, done: bool) -> None:
        m = len(chunk)
        self._chunk_rows[start, :m] = chunk
        self._chunk_rows[start, m:] = -1
        self._return[start] = float(np.dot(self._reward[list(chunk)], self._discounts[:m]))
        self._discount[start] = self._discounts[m]
        self._next_row[start] = nxt
        self._done[start] = done
        self._real[start] = m
        self._ready[start] = True

    # ----------------------------------------------------------------- sample

    def __len__(self) -> int:
        """Chunk samples ready to draw."""
        return int(self._ready.sum())

    def sample(self, batch_size: int, rng: np.random.Generator, min_version: int | None = None) -> Batch:
        """``batch_size`` chunk samples drawn uniformly (with replacement) from the ready ones.

        ``min_version`` excludes samples produced by a policy older than it (the lag
        cap); rows that no policy produced (version -1: demonstrations) are kept.
        Raises LookupError when nothing is ready.
        """
        s = self.spec
        with self._lock:
            ok: npt.NDArray[np.bool_] = self._ready
            if min_version is not None:
                ok = ok & ((self._version >= min_version) | (self._version < 0))
            candidates = np.flatnonzero(ok)
            if candidates.size == 0:
                raise LookupError(f"{self.name} replay has no chunk sample ready")
            idx = np.sort(candidates[rng.integers(0, candidates.size, batch_size)])
            rows = self._chunk_rows[idx].astype(np.int64)
            mask = rows >= 0
            safe = padded_rows(rows, idx)
            nxt = self._next_row[idx].astype(np.int64)
            real = self._real[idx]
            delay = self._delay[idx]
            chunk_start = self._chunk_start[idx]
            start_delay = self._start_delay[idx]
            own_chunk = self._chunk_id[safe] == self._start_chunk[idx][:, None]
            expert_rows = self._intervention[safe]
            expert_start = self._intervention[idx]
            out: Batch = {
                STATE_KEY: self._state[idx],
                ACTION_KEY: self._action[safe],
                ACTION_MASK_KEY: mask,
                REWARD_KEY: self._return[idx],
                RETURN_TO_GO_KEY: self._return_to_go[idx],
                DISCOUNT_KEY: self._discount[idx],
                DONE_KEY: self._done[idx],
                VERSION_KEY: self._version[idx],
                INTERVENTION_KEY: (self._intervention[safe] & mask).any(axis=1),
                TASK_KEY: [self._instructions[k] for k in self._instruction[idx].tolist()],
                NEXT_PREFIX + STATE_KEY: self._state[nxt],
            }
            for cam, mem in self._images.items():
                out[IMAGE_KEY_PREFIX + cam] = np.asarray(mem[idx])
                out[NEXT_PREFIX + IMAGE_KEY_PREFIX + cam] = np.asarray(mem[nxt])
        drawn = rng.integers(0, s.max_delay + 1, batch_size)
        # An expert's window (a demonstration, or a start tick a person drove) is taught as a whole,
        # with a drawn prefix: the expert acted on the state at every tick.
        expert = (delay < 0) | expert_start
        prefix = np.where(expert, drawn, np.where(chunk_start, start_delay, delay))
        out[ACTOR_SAMPLE_KEY] = chunk_start | expert
        out[PREFIX_LEN_KEY] = np.clip(prefix, 0, np.maximum(real - 1, 0)).astype(np.int64)
        in_prefix = np.arange(s.horizon) < out[PREFIX_LEN_KEY][:, None]
        own_rows = np.where(chunk_start[:, None], own_chunk | in_prefix, True)
        out[POLICY_MASK_KEY] = mask & np.where(expert_start[:, None], expert_rows, own_rows)
        return out

    def gather(
        self,
        rows: Sequence[tuple[int, int]],
        next_row: tuple[int, int] | None,
        actor_id: str,
        episode_id: int,
        terminated: bool,
    ) -> TransitionBatch | None:
        """Stored rows (position, serial) back as one episode (segment); None if any was overwritten.

        The last row ends the segment: ``terminated`` as given, truncated otherwise;
        ``next_row`` (when given) becomes its next observation.
        """
        pos = np.array([p for p, _ in rows], np.int64)
        want = np.array([s for _, s in rows], np.int64)
        with self._lock:
            if not len(pos) or (self._serial[pos] != want).any():
                return None
            if next_row is not None and self._serial[next_row[0]] != next_row[1]:
                return None
            nxt = np.array([] if next_row is None else [next_row[0]], np.int64)
            n = len(pos)
            ends = np.zeros(n, np.bool_)
            ends[-1] = True
            empty_f = np.zeros(n, np.float64)
            return TransitionBatch(
                actor_id=actor_id,
                state=self._state[pos],
                images={c: np.asarray(m[pos]) for c, m in self._images.items()},
                action=self._action[pos],
                proposed_action=self._action[pos],
                reward=self._reward[pos],
                terminated=ends & terminated,
                truncated=ends & (not terminated),
                intervention=self._intervention[pos],
                episode_id=np.full(n, episode_id, np.int64),
                tick=self._tick[pos],
                chunk_id=self._chunk_id[pos],
                index_in_chunk=self._index_in_chunk[pos],
                policy_version=self._version[pos],
                delay_ticks=self._delay[pos],
                obs_time=empty_f,
                action_time=empty_f,
                obs_timestamp=empty_f,
                instructions=tuple(self._instructions) or ("",),
                instruction_index=self._instruction[pos] if self._instructions else np.zeros(n, np.int32),
                next_rows=np.array([n - 1] if len(nxt) else [], np.int64),
                next_state=self._state[nxt],
                next_images={c: np.asarray(m[nxt]) for c, m in self._images.items()},
                next_tick=self._tick[nxt],
                next_timestamp=np.zeros(len(nxt), np.float64),
            )

    def clear_positions(self, positions: npt.NDArray[np.int64]) -> None:
        """Make the starts at ``positions`` unsampleable (their rows are about to be reused)."""
        with self._lock:
            self._ready[positions] = False
            self._chunk_start[positions] = False

    def stats(self) -> dict[str, int]:
        return {
            f"{self.name}_ready": len(self),
            f"{self.name}_rows_added": self.rows_added,
            f"{self.name}_refused_batches": self.refused_batches,
            f"{self.name}_dropped_starts": self.dropped_starts,
        }

    # ----------------------------------------------------------------- persistence

    _ARRAYS = (
        "_state", "_action", "_reward", "_terminated", "_truncated", "_intervention", "_episode", "_tick",
        "_chunk_id", "_index_in_chunk", "_version", "_delay", "_instruction", "_serial", "_ready",
        "_chunk_rows", "_next_row", "_return", "_discount", "_done", "_real", "_chunk_start", "_start_delay",
        "_return_to_go", "_start_chunk",
    )  # fmt: skip

    def save(self, folder: Path) -> None:
        """Write every row, sample link and open episode to ``folder`` (.npy and JSON, no pickle)."""
        folder.mkdir(parents=True, exist_ok=True)
        with self._lock:
            for name in self._ARRAYS:
                np.save(folder / f"{name[1:]}.npy", getattr(self, name))
            for cam, mem in self._images.items():
                np.save(folder / f"images-{cam}.npy", mem)
            meta = {
                "capacity": self.capacity,
                "spec": [self.spec.state_dim, self.spec.action_dim, self.spec.horizon],
                "cameras": {c: list(s) for c, s in self.spec.cameras.items()},
                "cursor": self._cursor,
                "next_serial": self._next_serial,
                "instructions": self._instructions,
                "open": {
                    k: [c.episode_id, c.last_tick, list(c.pending), c.rows] for k, c in self._open.items()
                },
                "counters": [self.rows_added, self.refused_batches, self.refused_rows, self.dropped_starts],
            }
            (folder / "replay.json").write_text(json.dumps(meta))

    def load(self, folder: Path) -> None:
        """Restore what :meth:`save` wrote; the capacity and spec must be the same."""
        meta = json.loads((folder / "replay.json").read_text())
        mine = [self.spec.state_dim, self.spec.action_dim, self.spec.horizon]
        cams = {c: list(s) for c, s in self.spec.cameras.items()}
        if meta["capacity"] != self.capacity or meta["spec"] != mine or meta["cameras"] != cams:
            raise ValueError(f"{folder}: saved {self.name} buffer does not match this one's capacity or spec")
        missing = [f"{name[1:]}.npy" for name in self._ARRAYS if not (folder / f"{name[1:]}.npy").is_file()]
        if missing:
            raise ValueError(
                f"{folder}: the saved {self.name} buffer lacks {', '.join(missing)} (written by an older"
                " robotrl); start the learner without it (learner.resume=false or a new run_dir)"
            )
        with self._lock:
            for name in self._ARRAYS:
                getattr(self, name)[...] = np.load(folder / f"{name[1:]}.npy", allow_pickle=False)
            for cam, mem in self._images.items():
                saved = np.load(folder / f"images-{cam}.npy", mmap_mode="r", allow_pickle=False)
                for lo in range(0, self.capacity, 4096):
                    mem[lo : lo + 4096] = saved[lo : lo + 4096]
            self._cursor, self._next_serial = int(meta["cursor"]), int(meta["next_serial"])
            self._instructions = list(meta["instructions"])
            self._instruction_ids = {t: i for i, t in enumerate(self._instructions)}
            self._open = {
                k: _Cursor(ep, tick, deque(_pairs(pending)), _pairs(rows))
                for k, (ep, tick, pending, rows) in meta["open"].items()
            }
            self.rows_added, self.refused_batches, self.refused_rows, self.dropped_starts = meta["counters"]

    def close(self) -> None:
        """Release the memory maps; delete their files when this buffer created the folder."""
        for mem in self._images.values():
            mem._mmap.close()  # type: ignore[attr-defined]
        self._images.clear()
        if self._remove_dir is not None:
            self._remove_dir()


def _pairs(items: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """(position, serial) pairs back from JSON lists."""
    return [(int(p), int(s)) for p, s in items]


def concat(batches: Sequence[Batch]) -> Batch:
    """Samples from several buffers as one batch (same keys; lists extend, arrays stack)."""
    if len(batches) == 1:
        return batches[0]
    out: Batch = {}
    for key, first in batches[0].items():
        if isinstance(first, list):
            out[key] = [x for b in batches for x in b[key]]
        else:
            out[key] = np.concatenate([b[key] for b in batches])
    return out
