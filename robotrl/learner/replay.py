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

import dataclasses
import json
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from robotrl.core import keys
from robotrl.core.batch import TransitionBatch
from robotrl.core.columns import FINITE
from robotrl.learner.rows import TickRows
from robotrl.learner.samples import (
    ACTOR_SAMPLE_KEY,
    DISCOUNT_KEY,
    DONE_KEY,
    INTERVENTION_KEY,
    NEXT_PREFIX,
    POLICY_MASK_KEY,
    RETURN_TO_GO_KEY,
    REWARD_KEY,
    VERSION_KEY,
    Batch,
    padded_rows,
)


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

        self._rows = TickRows(spec, spec.cameras, n, storage_dir, name)
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
        for col, dim in (("state", s.state_dim), ("action", s.action_dim)):
            have = getattr(batch, col).shape[1]
            if have != dim:
                raise ReplayError(f"{where}: {col} has {have} columns, the spec has {dim}")
        if set(batch.images) != set(s.cameras):
            raise ReplayError(f"{where}: cameras {sorted(batch.images)}, the spec has {sorted(s.cameras)}")
        for cam, shape in s.cameras.items():
            if batch.images[cam].shape[1:] != tuple(shape):
                raise ReplayError(
                    f"{where}: camera {cam!r} is {batch.images[cam].shape[1:]}, the spec has {tuple(shape)}"
                )
        for col in FINITE:
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
            self._rows.write(rows, nexts, batch)
            self._link(
                batch,
                stream,
                rows,
                serials[row_slot],
                dict(zip(batch.next_rows.tolist(), nexts.tolist(), strict=True)),
            )
            self.rows_added += n
            return Added(rows, serials[row_slot], nexts, serials[next_slot])

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
        if self._serial[prev] == serial and not self._rows["intervention"][prev]:
            self._rows["reward"][prev] -= self.spec.intervention_penalty

    def _set_returns_to_go(self, rows: Sequence[tuple[int, int]]) -> None:
        """An ended episode's discounted reward sums, from its last row back (to the oldest not
        overwritten: a row's sum needs only the rows after it)."""
        gamma, to_go = self.spec.gamma, 0.0
        for pos, serial in reversed(rows):
            if self._serial[pos] != serial:
                break
            to_go = float(self._rows["reward"][pos]) + gamma * to_go
            self._return_to_go[pos] = to_go

    def _ready_start(self, start: int, chunk: Sequence[int], nxt: int, done: bool) -> None:
        m = len(chunk)
        self._chunk_rows[start, :m] = chunk
        self._chunk_rows[start, m:] = -1
        self._return[start] = float(np.dot(self._rows["reward"][list(chunk)], self._discounts[:m]))
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
                version = self._rows["policy_version"]
                ok = ok & ((version >= min_version) | (version < 0))
            candidates = np.flatnonzero(ok)
            if candidates.size == 0:
                raise LookupError(f"{self.name} replay has no chunk sample ready")
            idx = np.sort(candidates[rng.integers(0, candidates.size, batch_size)])
            rows = self._chunk_rows[idx].astype(np.int64)
            mask = rows >= 0
            safe = padded_rows(rows, idx)
            nxt = self._next_row[idx].astype(np.int64)
            real = self._real[idx]
            col = self._rows.columns
            delay = col["delay_ticks"][idx]
            chunk_start = self._chunk_start[idx]
            start_delay = self._start_delay[idx]
            own_chunk = col["chunk_id"][safe] == self._start_chunk[idx][:, None]
            expert_rows = col["intervention"][safe]
            expert_start = col["intervention"][idx]
            out: Batch = {
                keys.STATE: col["state"][idx],
                keys.ACTION: col["action"][safe],
                keys.ACTION_MASK: mask,
                REWARD_KEY: self._return[idx],
                RETURN_TO_GO_KEY: self._return_to_go[idx],
                DISCOUNT_KEY: self._discount[idx],
                DONE_KEY: self._done[idx],
                VERSION_KEY: col["policy_version"][idx],
                INTERVENTION_KEY: (expert_rows & mask).any(axis=1),
                keys.TASK: self._rows.task(idx),
                NEXT_PREFIX + keys.STATE: col["state"][nxt],
            }
            for cam, mem in self._rows.images.items():
                out[keys.IMAGE_PREFIX + cam] = np.asarray(mem[idx])
                out[NEXT_PREFIX + keys.IMAGE_PREFIX + cam] = np.asarray(mem[nxt])
        drawn = rng.integers(0, s.max_delay + 1, batch_size)
        # An expert's window (a demonstration, or a start tick a person drove) is taught as a whole,
        # with a drawn prefix: the expert acted on the state at every tick.
        expert = (delay < 0) | expert_start
        prefix = np.where(expert, drawn, np.where(chunk_start, start_delay, delay))
        out[ACTOR_SAMPLE_KEY] = chunk_start | expert
        out[keys.PREFIX_LEN] = np.clip(prefix, 0, np.maximum(real - 1, 0)).astype(np.int64)
        in_prefix = np.arange(s.horizon) < out[keys.PREFIX_LEN][:, None]
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
            batch = self._rows.gather(pos, nxt, actor_id)
        ends = np.arange(len(pos)) == len(pos) - 1
        return dataclasses.replace(
            batch,
            terminated=ends & terminated,
            truncated=ends & (not terminated),
            episode_id=np.full(len(pos), episode_id, np.int64),
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
        "_serial", "_ready", "_chunk_rows", "_next_row", "_return", "_discount", "_done", "_real",
        "_chunk_start", "_start_delay", "_return_to_go", "_start_chunk",
    )  # fmt: skip
    """The chunk-sample arrays (the rows save themselves)."""

    def save(self, folder: Path) -> None:
        """Write every row, sample link and open episode to ``folder`` (.npy and JSON, no pickle)."""
        folder.mkdir(parents=True, exist_ok=True)
        with self._lock:
            written = np.flatnonzero(self._serial >= 0)
            self._rows.save(folder, int(written[-1]) + 1 if len(written) else 0)
            for name in self._ARRAYS:
                np.save(folder / f"{name[1:]}.npy", getattr(self, name))
            meta = {
                "capacity": self.capacity,
                "spec": [self.spec.state_dim, self.spec.action_dim, self.spec.horizon],
                "cameras": {c: list(s) for c, s in self.spec.cameras.items()},
                "cursor": self._cursor,
                "next_serial": self._next_serial,
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
        files = [*self._rows.files(), *(f"{name[1:]}.npy" for name in self._ARRAYS)]
        missing = [f for f in files if not (folder / f).is_file()]
        if missing:
            raise ValueError(
                f"{folder}: the saved {self.name} buffer lacks {', '.join(missing)} (written by an older"
                " robotrl); start the learner without it (learner.resume=false or a new run_dir)"
            )
        with self._lock:
            self._rows.load(folder)
            for name in self._ARRAYS:
                getattr(self, name)[...] = np.load(folder / f"{name[1:]}.npy", allow_pickle=False)
            self._cursor, self._next_serial = int(meta["cursor"]), int(meta["next_serial"])
            self._open = {
                k: _Cursor(ep, tick, deque(_pairs(pending)), _pairs(rows))
                for k, (ep, tick, pending, rows) in meta["open"].items()
            }
            self.rows_added, self.refused_batches, self.refused_rows, self.dropped_starts = meta["counters"]

    def close(self) -> None:
        """Release the memory maps; delete their folder when this buffer created it."""
        self._rows.close()


def _pairs(items: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """(position, serial) pairs back from JSON lists."""
    return [(int(p), int(s)) for p, s in items]
