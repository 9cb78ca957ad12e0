"""The learner loop: an ingest thread fills the buffers while the main thread runs update groups.

Ingest: every :class:`TransitionBatch` from the transition :class:`BatchReceiver` goes
into the online buffer (a refused batch is counted and logged, never written),
and the :class:`AnchorFeeder` copies intervention segments and fast successes into
the anchor. Updates: once ``learning_starts`` samples are ready, update groups run
back to back (paused, Reverb-style, while samples drawn per transition ingested
exceed ``max_samples_per_insert``; optionally drawn ahead by a :class:`Prefetcher`);
each batch is ``anchor_fraction`` anchor and the rest online
(whichever buffer is empty gives way to the other). Online samples older than
``max_policy_lag`` versions are not drawn, and the lag of what is drawn is logged.
After a group that changed the policy, its weights go out through the weight
:class:`Sender` as the next version; versions only grow, across restarts too: a resumed
learner continues the count of its checkpoint or of its last publish recorded beside it
(``Checkpointer.note_published``), and until its first publish a learner raises its count to
the newest version its actors report (a learner restarted in a new run folder then numbers
above the versions in its actors' transitions, not from 1 again, if a batch of theirs reaches
it before its first publish).

Guards: an :class:`Admission` refuses implausible batches before they are journaled or
stored, and an :class:`UpdateGuard` checks every group's losses and state before anything
is published or checkpointed, rolling a non-finite group back (see :mod:`robotrl.learner.guard`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from robotrl.config.learner import LearnerConfig
from robotrl.core.batch import TransitionBatch
from robotrl.core.log_limit import EveryFewSeconds
from robotrl.core.protocols import Algorithm, BatchReceiver, Sender
from robotrl.core.types import WeightUpdate
from robotrl.learner.admission import Admission
from robotrl.learner.anchor import AnchorBuffer, AnchorFeeder
from robotrl.learner.checkpoint import Checkpointer, Counters, NonFiniteStateError
from robotrl.learner.distributed import SINGLE, BatchScatter, GroupCommands, Ranks, whole_state
from robotrl.learner.guard import UpdateGuard, nonfinite_tensors
from robotrl.learner.journal import LEDGER_FILE, Journal, load_ledger
from robotrl.learner.metrics import MetricsLog
from robotrl.learner.prefetch import Prefetcher
from robotrl.learner.replay import ChunkReplay, ReplayError
from robotrl.learner.samples import VERSION_KEY, Batch, concat
from robotrl.learner.snapshots import PolicySnapshots
from robotrl.transport.spool import SpoolFullError

log = logging.getLogger(__name__)


class Learner:
    """Composes buffers, an algorithm and two links; :meth:`run` is the whole role."""

    def __init__(
        self,
        algorithm: Algorithm,
        online: ChunkReplay,
        anchor: AnchorBuffer,
        cfg: LearnerConfig,
        transitions: BatchReceiver,
        weights: Sender[WeightUpdate],
        *,
        metrics: MetricsLog | None = None,
        checkpointer: Checkpointer | None = None,
        journal: Journal | None = None,
        counters: Counters | None = None,
        admission: Admission | None = None,
        snapshots: PolicySnapshots | None = None,
        weights_subset: str = "trainable",
        prefetch: int = 0,
        seed: int = 0,
        clock: Callable[[], float] = time.monotonic,
        ranks: Ranks = SINGLE,
    ) -> None:
        self.algorithm, self.online, self.anchor, self.cfg = algorithm, online, anchor, cfg
        self.transitions, self.weights = transitions, weights
        self.metrics, self.checkpointer, self.journal = metrics, checkpointer, journal
        self.counters = counters or Counters()
        self.admission = admission
        self.snapshots = snapshots
        self.guard = UpdateGuard(
            algorithm, cfg.guard.max_nonfinite_groups, ranks.any if ranks.sharded else None
        )
        self.feeder = AnchorFeeder(online, anchor)
        self.subset = weights_subset
        self.prefetch = prefetch
        self.clock = clock
        self.ranks = ranks
        """The learner's ranks, this one rank 0 (:mod:`robotrl.learner.distributed`): each update
        samples ``batch_size`` per rank and scatters the other ranks' shards."""
        self.commands = GroupCommands(ranks)
        self._rng = np.random.default_rng(seed)
        self._stop = threading.Event()
        self._data = threading.Condition()
        self._ingest_thread: threading.Thread | None = None
        self._ingest_lock = threading.Lock()
        """Held while a batch is received, journaled and stored, and while a checkpoint is written,
        so a checkpoint's buffers and transport ledger name the same batches."""
        self.refused_batches = 0
        self.journal_refusals = EveryFewSeconds(log, logging.ERROR, clock=clock)
        """Batches the journal refused, handed back unacknowledged (the actor resends them)."""
        self.publish_refused = 0
        self._version_lock = threading.Lock()
        """Guards ``counters.policy_version`` between the ingest thread (raising it before the
        first publish) and :meth:`publish` (incrementing it)."""
        self._published = False
        self.throttled = threading.Event()
        """Set while updates wait for the rate limit (samples per insert)."""
        self._inserted = 0
        self._sampled = 0
        self._lag_sum = 0
        self._lag_n = 0
        self._lag_max = 0
        self._window_start = clock()
        self._window_transitions = 0
        self._window_updates = 0

    # ----------------------------------------------------------------- ingest

    def ingest(self, batch: TransitionBatch) -> bool:
        """Store one batch; False when the buffer refused it (counted and logged, not raised)."""
        try:
            added = self.online.add(batch)
        except ReplayError as exc:
            self.refused_batches += 1
            log.warning("%s", exc)
            return False
        self.feeder.observe(batch, added)
        with self._data:
            self.counters.transitions += len(batch)
            self._inserted += len(batch)
            self._window_transitions += len(batch)
            self._data.notify_all()
        return True

    def _ingest_forever(self) -> None:
        while not self._stop.is_set():
            with self._ingest_lock:
                refused = self.journal_refusals.total
                self.ingest_next(0.05)
            if self.journal_refusals.total > refused:
                self._stop.wait(0.05)  # the journal is full: give a checkpoint the lock to empty it

    def ingest_next(self, timeout_s: float) -> bool:
        """Receive, journal and store one batch; False when none came within ``timeout_s``
        or the journal refused it.

        With a journal, the batch is on disk before the link acknowledges it (the
        receiver acknowledges a batch at the next receive), so an acknowledged batch
        survives a learner crash. A batch the journal refuses is handed back to the link
        unacknowledged and not stored: the actor keeps it and sends it again."""
        item = self.transitions.recv_item(timeout_s)
        if item is None:
            return False
        # Before its first publish a learner adopts the versions its actors report (no upper
        # bound yet); only a batch admitted on its other values may raise the count.
        newest = self.newest_version() if self._published else np.iinfo(np.int64).max
        if self.admission is not None and not self.admission.admit(item.batch, item.stream, item.seq, newest):
            return True  # acknowledged and dropped: a resend would be refused again
        self._count_above_reported_versions(item.batch)
        if self.journal is not None:
            try:
                self.journal.append(item)
            except (SpoolFullError, OSError) as exc:
                self.transitions.hand_back()
                self.journal_refusals.event(
                    "journal refused batch %s/%d (%s): not acknowledged, the actor will resend it",
                    item.actor_id,
                    item.seq,
                    exc,
                )
                return False
        self.ingest(item.batch)
        return True

    def _count_above_reported_versions(self, batch: TransitionBatch) -> None:
        """Before this learner's first publish, raise its version count to the newest version in
        ``batch``: its first update then numbers above what its actors run, and the policy lag of
        their rows stays meaningful (a learner started in a new run folder counts from 0)."""
        reported = int(batch.policy_version.max(initial=-1))
        with self._version_lock:
            if self._published or reported <= self.counters.policy_version:
                return
            self.counters.policy_version = reported
        log.info("policy versions continue above v%d, the newest actor %s reports", reported, batch.actor_id)

    def start_ingest(self) -> None:
        if self._ingest_thread is None:
            self._ingest_thread = threading.Thread(target=self._ingest_forever, name="ingest", daemon=True)
            self._ingest_thread.start()

    def stop(self) -> None:
        """Ask :meth:`run` to finish after the current group (safe from any thread or a signal)."""
        self._stop.set()
        with self._data:
            self._data.notify_all()

    # ----------------------------------------------------------------- sampling

    def _min_version(self) -> int | None:
        lag = self.cfg.max_policy_lag
        return None if lag is None else self.counters.policy_version - lag

    def ready(self) -> int:
        """Chunk samples stored and ready, online and anchor (the lag cap is checked apart)."""
        return len(self.online) + len(self.anchor)

    def next_batch(self, rows: int | None = None) -> Batch:
        """One training batch of ``rows`` (default ``batch_size`` for each rank, which rank 0
        scatters): ``anchor_fraction`` anchor, the rest online within the lag cap."""
        size = rows if rows is not None else self.cfg.batch_size * self.ranks.world
        n_anchor = round(size * self.cfg.anchor_fraction) if len(self.anchor) else 0
        parts: list[Batch] = []
        try:
            online = (
                self.online.sample(size - n_anchor, self._rng, self._min_version())
                if n_anchor < size
                else None
            )
        except LookupError:
            online, n_anchor = None, size
        if online is not None:
            lag = self.counters.policy_version - online[VERSION_KEY]
            lag = lag[online[VERSION_KEY] >= 0]
            if lag.size:
                self._lag_sum += int(lag.sum())
                self._lag_n += int(lag.size)
                self._lag_max = max(self._lag_max, int(lag.max()))
            parts.append(online)
        if n_anchor:
            try:
                parts.append(self.anchor.sample(n_anchor, self._rng))
            except LookupError:  # emptied since it was counted: draw online instead
                parts.append(self.online.sample(n_anchor, self._rng, self._min_version()))
        self._window_updates += 1
        self._sampled += size
        return concat(parts)

    def _wait_for_data(self) -> bool:
        """Block until ``learning_starts`` samples are ready and the rate limit allows a group;
        False when stopped first."""
        with self._data:
            while not self._stop.is_set():
                if self.ready() >= max(self.cfg.learning_starts, 1) and self._can_sample():
                    if not self._over_rate():
                        self.throttled.clear()
                        return True
                    self.throttled.set()
                self._data.wait(timeout=0.5)
        return False

    def _over_rate(self) -> bool:
        spi = self.cfg.max_samples_per_insert
        if spi is None:
            return False
        return self._sampled >= spi * max(self._inserted, self.cfg.learning_starts)

    def _can_sample(self) -> bool:
        if len(self.anchor):
            return True
        try:
            self.online.sample(1, np.random.default_rng(0), self._min_version())
        except LookupError:
            return False
        return True

    # ----------------------------------------------------------------- updates

    def newest_version(self) -> int:
        """The newest policy version this learner knows: batches claiming a later one are refused."""
        return self.counters.policy_version

    def publish(self) -> Mapping[str, npt.NDArray[np.generic]] | None:
        """Send the policy as the next policy version; the weights sent (None: non-finite, not sent)."""
        weights = self._policy_weights()
        bad = nonfinite_tensors(weights)
        if bad:  # the update guard catches this first; the wire must never carry it
            self.publish_refused += 1
            log.error("policy weights %s are non-finite: not published", ", ".join(bad[:5]))
            return None
        with self._version_lock:
            self.counters.policy_version += 1
            self._published = True
        if self.checkpointer is not None:
            self.checkpointer.note_published(self.counters.policy_version)
        update = WeightUpdate.build(self.counters.policy_version, weights, self.subset, time.time())
        if not self.weights.send(update):
            self.publish_refused += 1
            log.warning("policy version %d was refused by the weight link", update.policy_version)
        return weights

    def _snapshot(self, published: Mapping[str, npt.NDArray[np.generic]] | None = None) -> None:
        """Keep the policy the actors now hold: ``published`` by this group, else the last published
        (the policy changes only when it is published) or, before any, the one training started from."""
        if self.snapshots is not None:
            self.snapshots.write(
                self.counters, published if published is not None else self._policy_weights()
            )

    def _policy_weights(self) -> Mapping[str, npt.NDArray[np.generic]]:
        """The policy's weights, gathered with the other ranks where they shard it."""
        self.commands.gather_weights()
        return self.algorithm.policy_weights()

    def run(self, max_groups: int = 0) -> Counters:
        """Ingest and update until stopped or ``max_groups`` groups ran (0: until stopped)."""
        resumed = self.counters.policy_version > 0  # read before ingest may raise it to the actors' versions
        self.start_ingest()
        if self.cfg.policy_lr_end < 1 and not self.cfg.max_groups:
            log.warning(
                "learner.policy_lr_end anneals over learner.max_groups, which is 0: the rate stays constant"
            )
        if resumed:
            self.publish()  # a resumed learner re-announces its policy under a new version
        if self.snapshots is not None and self.counters.groups == 0:
            self._snapshot()  # group 0: the policy fine-tuning starts from
        done = 0
        prefetcher: Prefetcher | None = None
        self.guard.remember()
        try:
            while not self._stop.is_set() and (max_groups == 0 or done < max_groups):
                if not self._wait_for_data():
                    break
                if self.prefetch and prefetcher is None:
                    prefetcher = Prefetcher(self.next_batch, self.prefetch)
                progress = self.counters.groups / self.cfg.max_groups if self.cfg.max_groups else None
                if progress is not None:  # a known budget: schedules follow the run's progress
                    self.algorithm.set_progress(progress)
                self.commands.run_group(progress)
                sample = prefetcher.get if prefetcher else self.next_batch
                result = self.algorithm.update_group(BatchScatter(self.ranks, sample))
                if not self.guard.check(self.counters.groups + 1, result):
                    continue  # rolled back: nothing published, logged or checkpointed
                self.counters.groups += 1
                done += 1
                published = self.publish() if result.get("actor_updates", 0) > 0 else None
                if self.snapshots is not None and self.snapshots.due(self.counters.groups):
                    self._snapshot(published)
                if self.counters.groups % self.cfg.log_every_groups == 0:
                    self._log(result)
                if self.checkpointer and self.counters.groups % self.cfg.checkpoint_every_groups == 0:
                    self.save()
        finally:
            self._stop.set()
            if prefetcher is not None:
                prefetcher.close()
            ingesting = False
            if self._ingest_thread is not None:
                self._ingest_thread.join(timeout=5)
                ingesting = self._ingest_thread.is_alive()
                self._ingest_thread = None
        if self.snapshots is not None and done and self.snapshots.last_group != self.counters.groups:
            self._snapshot()  # the last group's policy, published or the last published
        # A stop checkpoints what this run trained or journaled (an incarnation that ran no group
        # may still hold acknowledged batches only in its journal: the checkpoint takes them in).
        if self.checkpointer and (done or (self.journal is not None and self.journal.files())):
            self.save()
        # Only after the last snapshot and checkpoint, which a sharded policy's ranks gather
        # together; after an error the other ranks end with it (they raise too, or torchrun ends them).
        self.commands.stop()
        if not ingesting:  # the last batch handed out is stored (or handed back): say so now
            self.transitions.commit()
        return self.counters

    def save(self) -> None:
        """Checkpoint the algorithm, the counters, the transport ledger and (when enabled) the
        buffers as of one instant; then forget the journaled batches the checkpoint holds."""
        assert self.checkpointer is not None
        buffers = self._save_buffers if self.cfg.save_buffers else None
        ledger = self.transitions.ledger
        with self._ingest_lock:
            journaled = self.journal.files() if self.journal is not None else []
            extra = {LEDGER_FILE: ledger.to_json()} if ledger is not None else {}
            try:
                self.commands.gather_state()
                state = whole_state(self.ranks, self.algorithm.state_dict())
                self.checkpointer.save(
                    state,
                    self.counters,
                    self._policy_weights(),
                    buffers,
                    extra,
                )
            except NonFiniteStateError as exc:
                log.error("%s", exc)
                return
        if self.journal is not None:
            self.journal.remove(journaled)

    def replay_journal(self, checkpoint: Path | None) -> int:
        """After a restart: store the journaled batches the checkpoint does not hold; their count."""
        if self.journal is None:
            return 0
        held = load_ledger(checkpoint)
        n = 0
        for _, item in self.journal.read():
            if held.record(item.actor_id, item.stream, item.seq):
                self._count_above_reported_versions(item.batch)
                self.ingest(item.batch)
                n += 1
        if n:
            log.info("journal: %d batches received after the last checkpoint restored", n)
        return n

    def _save_buffers(self, folder: Path) -> None:
        self.online.save(folder / "online")
        self.anchor.save(folder / "anchor")

    def load_buffers(self, folder: Path) -> None:
        """Restore what a checkpoint with ``save_buffers`` holds."""
        self.online.load(folder / "online")
        self.anchor.load(folder / "anchor")

    def _log(self, result: Any) -> None:
        now = self.clock()
        elapsed = max(now - self._window_start, 1e-9)
        record: dict[str, float | int] = {
            "group": self.counters.groups,
            "policy_version": self.counters.policy_version,
            "transitions": self.counters.transitions,
            "ingest_tps": self._window_transitions / elapsed,
            "updates_per_s": self._window_updates / elapsed,
            "lag_mean": self._lag_sum / self._lag_n if self._lag_n else 0.0,
            "lag_max": self._lag_max,
            "samples_per_insert": self._sampled / max(self._inserted, 1),
            "refused_batches": self.refused_batches,
            **(self.admission.counts() if self.admission is not None else {}),
            "nonfinite_groups": self.guard.nonfinite_groups,
            "journal_refused": self.journal_refusals.total,
            "segments": self.feeder.segments_added,
            "successes_kept": self.feeder.successes_kept,
            **{k: float(v) for k, v in result.items()},
            **self.online.stats(),
            **self.anchor.stats(),
        }
        if self.metrics is not None:
            self.metrics.write(record)
        self._window_start, self._window_transitions, self._window_updates = now, 0, 0
        self._lag_sum = self._lag_n = self._lag_max = 0
