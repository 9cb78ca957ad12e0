"""The learner guards itself against an update that turns its networks non-finite.

An overflowing critic (rewards of 3e38, a learning rate too high) makes one update group end
with NaN losses and NaN weights; published, the actors refuse every later version, and
checkpointed, the good checkpoints rotate out. :class:`UpdateGuard` checks each group's
losses and the algorithm's whole state (networks, optimisers, weight average) before the
loop publishes or checkpoints, and rolls a non-finite group back to a copy of the state
after the last good group held in memory (one clone of the state per group: cheaper than
rereading a checkpoint, and it loses one group, not ``checkpoint_every_groups``). After
``max_nonfinite_groups`` bad groups in a row it raises :class:`LearnerDivergedError`: the
learner stops rather than publish.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch.distributed.tensor import DTensor

from robotrl.core.protocols import Algorithm

log = logging.getLogger(__name__)


class LearnerDivergedError(RuntimeError):
    """Update groups kept ending non-finite after rollbacks: the learner cannot recover."""


def nonfinite_metrics(metrics: Mapping[str, float]) -> list[str]:
    """The names of the metrics (losses) that are NaN or infinite."""
    return [k for k, v in metrics.items() if isinstance(v, int | float) and not math.isfinite(v)]


def nonfinite_tensors(state: Any, prefix: str = "") -> list[str]:
    """The dotted names of the floating tensors and arrays in ``state`` (nested mappings and
    lists, as a ``state_dict`` holds them) that hold NaN or infinity."""
    tensors = dict(_float_tensors(state, prefix))
    if not tensors:
        return []
    by_device: dict[torch.device, list[torch.Tensor]] = {}
    for t in tensors.values():
        by_device.setdefault(t.device, []).append(t.detach().float().sum())
    # A finite sum needs finite terms: one device sync per device when all is well.
    if all(bool(torch.isfinite(torch.stack(sums)).all()) for sums in by_device.values()):
        return []
    return [name for name, t in tensors.items() if not bool(torch.isfinite(t).all())]


def _float_tensors(state: Any, prefix: str) -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(state, torch.Tensor):
        local = state.to_local() if isinstance(state, DTensor) else state  # sharded: this rank's slice
        if local.is_floating_point() and local.numel():
            yield prefix, local
    elif isinstance(state, np.ndarray):
        if state.dtype.kind == "f" and state.size:
            yield prefix, torch.from_numpy(state)
    elif isinstance(state, Mapping):
        for key, value in state.items():
            yield from _float_tensors(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(state, list | tuple):
        for i, value in enumerate(state):
            yield from _float_tensors(value, f"{prefix}.{i}")


def clone_state(state: Any) -> Any:
    """A copy of ``state`` that later updates do not change (a ``state_dict`` holds references
    to the live parameters and optimiser moments)."""
    if isinstance(state, torch.Tensor):
        return state.detach().clone()
    if isinstance(state, np.ndarray):
        return state.copy()
    if isinstance(state, Mapping):
        return {key: clone_state(value) for key, value in state.items()}
    if isinstance(state, list | tuple):
        return type(state)(clone_state(value) for value in state)
    return state


class UpdateGuard:
    """Keeps the state after the last good update group and restores it after a bad one."""

    def __init__(
        self,
        algorithm: Algorithm,
        max_nonfinite_groups: int,
        any_rank: Callable[[bool], bool] | None = None,
    ) -> None:
        self.algorithm = algorithm
        self.max_nonfinite_groups = max_nonfinite_groups
        self.any_rank = any_rank
        """Where each rank checks only its slice of a sharded policy: whether any rank found
        one non-finite (every rank then rolls back together)."""
        self.nonfinite_groups = 0
        """Update groups rolled back, in all."""
        self.consecutive = 0
        self._good: Any = None

    def remember(self) -> None:
        """Hold the algorithm's present state as the one to roll back to."""
        self._good = clone_state(self.algorithm.state_dict())

    def check(self, group: int, metrics: Mapping[str, float]) -> bool:
        """Whether the group that returned ``metrics`` left the algorithm finite. If so its
        state becomes the last good one; if not the algorithm is rolled back to the last good
        state (error logged), or :class:`LearnerDivergedError` raised after too many in a row."""
        bad = nonfinite_metrics(metrics) or nonfinite_tensors(self.algorithm.state_dict())
        if self.any_rank is not None and self.any_rank(bool(bad)) and not bad:
            bad = ["the policy's slice on another rank"]
        if not bad:
            self.consecutive = 0
            self.remember()
            return True
        self.nonfinite_groups += 1
        self.consecutive += 1
        log.error(
            "update group %d is non-finite (%s); rolled back to the last good state, not published "
            "or checkpointed (%d in a row, stop at %d)",
            group,
            ", ".join(bad[:5]),
            self.consecutive,
            self.max_nonfinite_groups,
        )
        if self._good is not None:
            self.algorithm.load_state_dict(clone_state(self._good))
        if self.consecutive >= self.max_nonfinite_groups:
            raise LearnerDivergedError(
                f"{self.consecutive} update groups in a row ended non-finite ({', '.join(bad[:5])}) "
                f"after rolling back each (learner.guard.max_nonfinite_groups={self.max_nonfinite_groups}): "
                "the learner stops instead of publishing; check the rewards and learning rates, then "
                "resume from the last good checkpoint"
            )
        return False
