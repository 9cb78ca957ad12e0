"""Policy snapshots: the learner's published policy every few update groups, kept for the
learning curve (:mod:`robotrl.experiment.curve` evaluates each on fixed seeds afterwards).

Checkpoints rotate and hold the whole state; a snapshot is only the policy tensors the actors
received (the weight average with ``learner.policy_ema``) and what the learner had done then,
small enough to keep every one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt

from robotrl.core.policy_snapshots import PolicySnapshot, write_policy_snapshot
from robotrl.learner.checkpoint import Counters
from robotrl.learner.guard import nonfinite_tensors

log = logging.getLogger(__name__)


class PolicySnapshots:
    """Writes ``<run_dir>/policy_snapshots``: at group 0 (the policy fine-tuning starts from),
    every ``every`` groups, and at the last group the learner ran."""

    def __init__(self, run_dir: Path, every: int, clock: Callable[[], float] = time.monotonic) -> None:
        if every < 1:
            raise ValueError(f"snapshots every {every} groups: at least 1")
        self.run_dir, self.every, self.clock = run_dir, every, clock
        self._start = clock()
        self.last_group: int | None = None

    def due(self, group: int) -> bool:
        return group % self.every == 0 and group != self.last_group

    def write(self, counters: Counters, weights: Mapping[str, npt.NDArray[np.generic]]) -> None:
        """Keep ``weights`` as the policy of ``counters.groups`` and ``counters.policy_version``."""
        bad = nonfinite_tensors(weights)
        if bad:
            log.error("policy snapshot of group %d not written: non-finite %s", counters.groups, bad[:5])
            return
        snapshot = PolicySnapshot(
            group=counters.groups,
            policy_version=counters.policy_version,
            transitions=counters.transitions,
            elapsed_s=round(self.clock() - self._start, 3),
            time=round(time.time(), 3),
        )
        write_policy_snapshot(self.run_dir, snapshot, weights)
        self.last_group = counters.groups
