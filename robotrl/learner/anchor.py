"""The anchor buffer: the data the policy must never drift away from.

Three tables, sampled together uniformly over their chunk samples:

- **demonstrations**, loaded once from a local LeRobotDataset;
- **intervention segments**: each maximal run of ticks where a human drove the arm,
  cut out of the online stream as it ends, with the following observation as its
  next state (so its chunks bootstrap exactly);
- **the fastest K successful episodes so far**, kept whole in K fixed slots; a
  faster success evicts the slowest. An episode is successful when it terminated
  with a positive reward on its last tick (the environments' sparse success reward).

The :class:`AnchorFeeder` watches what the online buffer stored and copies those
rows out of it, so nothing is held twice while an episode is still running.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from robotrl.core.batch import TransitionBatch
from robotrl.learner.replay import Added, ChunkReplay, ReplaySpec
from robotrl.learner.samples import Batch, concat

SLOTS_FILE = "slots.json"
"""Beside the success slots' rows in a checkpoint: which slot holds which episode length."""


class SuccessStore:
    """The fastest ``k`` successful episodes, each in a fixed slot of ``slot_rows`` rows."""

    def __init__(self, spec: ReplaySpec, k: int, slot_rows: int, storage_dir: Path | None) -> None:
        self.k, self.slot_rows = k, slot_rows
        self.table = ChunkReplay(spec, max(k * slot_rows, 2 * spec.horizon), storage_dir, "successes")
        self._heap: list[tuple[int, int]] = []  # (-length, slot): the slowest kept on top
        self.offered = 0

    def offer(self, episode: TransitionBatch) -> bool:
        """Keep ``episode`` if it is among the fastest ``k``; True when kept."""
        self.offered += 1
        length = len(episode)
        if self.k == 0 or length + len(episode.next_rows) > self.slot_rows:
            return False
        if len(self._heap) < self.k:
            slot = len(self._heap)
        elif length < -self._heap[0][0]:
            slot = heapq.heappop(self._heap)[1]
        else:
            return False
        base = slot * self.slot_rows
        self.table.clear_positions(np.arange(base, base + self.slot_rows))
        positions = base + np.arange(length + len(episode.next_rows))
        self.table._add(episode, f"success-slot-{slot}", positions)
        heapq.heappush(self._heap, (-length, slot))
        return True

    def lengths(self) -> list[int]:
        return sorted(-n for n, _ in self._heap)

    def save(self, folder: Path) -> None:
        self.table.save(folder)
        (folder / SLOTS_FILE).write_text(json.dumps({"heap": self._heap, "offered": self.offered}))

    def load(self, folder: Path) -> None:
        self.table.load(folder)
        meta = json.loads((folder / SLOTS_FILE).read_text())
        self._heap = [(int(n), int(slot)) for n, slot in meta["heap"]]
        heapq.heapify(self._heap)
        self.offered = int(meta["offered"])


class AnchorBuffer:
    """Demonstrations, intervention segments and the fastest successes, sampled as one buffer."""

    def __init__(
        self,
        spec: ReplaySpec,
        intervention_capacity: int,
        fastest_k: int,
        max_episode_ticks: int,
        storage_dir: Path | None = None,
    ) -> None:
        self.spec = spec
        self._storage = storage_dir
        self.demos: ChunkReplay | None = None
        self.interventions = ChunkReplay(spec, intervention_capacity, storage_dir, "interventions")
        self.successes = SuccessStore(spec, fastest_k, max_episode_ticks + 1, storage_dir)

    def load_demos(self, episodes: Iterable[TransitionBatch], rows: int) -> int:
        """Store demonstration episodes (``rows`` in all, next observations included)."""
        self.demos = ChunkReplay(self.spec, max(2 * rows + 2, 2 * self.spec.horizon), self._storage, "demos")
        count = 0
        for ep in episodes:
            self.demos.add(ep)
            count += 1
        return count

    def tables(self) -> list[ChunkReplay]:
        found = [self.interventions, self.successes.table]
        return [self.demos, *found] if self.demos is not None else found

    def __len__(self) -> int:
        return sum(len(t) for t in self.tables())

    def sample(self, batch_size: int, rng: np.random.Generator, min_version: int | None = None) -> Batch:
        """Uniform over every anchor chunk sample; raises LookupError when there is none."""
        del min_version  # the anchor is kept regardless of the policy that produced it
        for _ in range(3):  # a table can empty between counting and drawing (a success slot refilling)
            tables = [t for t in self.tables() if len(t)]
            if not tables:
                break
            sizes = np.array([len(t) for t in tables], np.float64)
            counts = rng.multinomial(batch_size, sizes / sizes.sum())
            try:
                return concat([t.sample(int(c), rng) for t, c in zip(tables, counts, strict=True) if c])
            except LookupError:
                continue
        raise LookupError("anchor buffer has no chunk sample ready")

    def save(self, folder: Path) -> None:
        """Interventions and successes (demonstrations are reloaded from their dataset)."""
        self.interventions.save(folder / "interventions")
        self.successes.save(folder / "successes")

    def load(self, folder: Path) -> None:
        self.interventions.load(folder / "interventions")
        self.successes.load(folder / "successes")

    def stats(self) -> dict[str, int]:
        out = {"anchor_ready": len(self), "anchor_successes": len(self.successes.lengths())}
        for t in self.tables():
            out.update(t.stats())
        return out

    def close(self) -> None:
        for t in self.tables():
            t.close()


@dataclass
class _Episode:
    episode_id: int
    last_tick: int
    rows: list[tuple[int, int]] = field(default_factory=list)
    run_start: int | None = None


class AnchorFeeder:
    """Copies intervention segments and fast successes from the online buffer into the anchor."""

    def __init__(self, online: ChunkReplay, anchor: AnchorBuffer) -> None:
        self.online, self.anchor = online, anchor
        self._open: dict[str, _Episode] = {}
        self._segments = 0
        self.segments_added = 0
        self.successes_kept = 0
        self.lost = 0
        """Segments or episodes the online ring overwrote before they could be copied."""

    def observe(self, batch: TransitionBatch, added: Added) -> None:
        """Follow ``batch`` (just added to the online buffer at ``added``) tick by tick."""
        next_at = dict(
            zip(
                batch.next_rows.tolist(),
                zip(added.next_positions.tolist(), added.next_serials.tolist(), strict=True),
                strict=True,
            )
        )
        episodes, ticks = batch.episode_id.tolist(), batch.tick.tolist()
        intervened = batch.intervention.tolist()
        terminated, truncated = batch.terminated.tolist(), batch.truncated.tolist()
        rewards = batch.reward.tolist()
        rows = zip(added.positions.tolist(), added.serials.tolist(), strict=True)
        for i, row in enumerate(rows):
            ep = self._open.get(batch.actor_id)
            if ep is None or ep.episode_id != episodes[i] or ticks[i] != ep.last_tick + 1:
                ep = self._open[batch.actor_id] = _Episode(episodes[i], ticks[i])
            ep.last_tick = ticks[i]
            if intervened[i] and ep.run_start is None:
                ep.run_start = len(ep.rows)
            elif not intervened[i] and ep.run_start is not None:
                self._segment(batch.actor_id, ep.rows[ep.run_start :], row, terminated=False)
                ep.run_start = None
            ep.rows.append(row)
            if not (terminated[i] or truncated[i]):
                continue
            nxt = next_at.get(i)
            if ep.run_start is not None:
                self._segment(batch.actor_id, ep.rows[ep.run_start :], nxt, terminated[i])
            if terminated[i] and rewards[i] > 0:
                episode = self.online.gather(ep.rows, nxt, batch.actor_id, episodes[i], terminated=True)
                if episode is None:
                    self.lost += 1
                elif self.anchor.successes.offer(episode):
                    self.successes_kept += 1
            del self._open[batch.actor_id]

    def _segment(
        self, actor: str, rows: list[tuple[int, int]], nxt: tuple[int, int] | None, terminated: bool
    ) -> None:
        self._segments += 1
        segment = self.online.gather(rows, nxt, actor, self._segments, terminated)
        if segment is None:
            self.lost += 1
            return
        self.anchor.interventions._add(segment, f"intervention-{self._segments}", None)
        self.segments_added += 1
