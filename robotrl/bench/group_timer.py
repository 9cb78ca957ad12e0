"""Times the learner loop's update groups from inside the loop, for the learner bench.

Timing around :meth:`Learner.run` counts its start, its last checkpoint and the ingest
thread's join, and a stop timer cuts a phase at a random point inside a group. Stamping
each group's end instead gives the loop's steady rate: ``(n - 1)`` whole group-to-group
intervals, each with everything the loop does between groups (the guard's copy of the
state, publishing), the first group left out as warm-up.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from robotrl.core.protocols import Algorithm


class GroupTimer:
    """An :class:`Algorithm` that delegates to ``algorithm`` and stamps every group's end with
    ``clock()`` and ``transitions()`` (the loop's stored-transition count); once ``min_groups``
    intervals spanning at least ``seconds`` are stamped it calls ``stop`` (the loop finishes the
    group it is in and returns)."""

    def __init__(
        self,
        algorithm: Algorithm,
        stop: Callable[[], None],
        transitions: Callable[[], int],
        seconds: float,
        min_groups: int = 2,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.algorithm = algorithm
        self._stop, self._transitions, self._clock = stop, transitions, clock
        self.seconds, self.min_groups = seconds, max(min_groups, 1)
        self.ends: list[float] = []
        self.stored: list[int] = []

    def update_group(self, next_batch: Callable[[], Mapping[str, Any]]) -> Mapping[str, float]:
        out = self.algorithm.update_group(next_batch)
        self.ends.append(self._clock())
        self.stored.append(self._transitions())
        if len(self.ends) > self.min_groups and self.ends[-1] - self.ends[0] >= self.seconds:
            self._stop()
        return out

    @property
    def window_s(self) -> float:
        """Seconds from the first group's end to the last's (0 before two groups)."""
        return self.ends[-1] - self.ends[0] if len(self.ends) > 1 else 0.0

    def groups_per_s(self) -> float:
        """Whole groups per second over the window, the first group left out; 0 before two."""
        return (len(self.ends) - 1) / self.window_s if self.window_s > 0 else 0.0

    def transitions_per_s(self) -> float:
        """Transitions the loop stored per second over the same window."""
        return (self.stored[-1] - self.stored[0]) / self.window_s if self.window_s > 0 else 0.0

    def policy_weights(self) -> Mapping[str, npt.NDArray[np.generic]]:
        return self.algorithm.policy_weights()

    def set_progress(self, fraction: float) -> None:
        self.algorithm.set_progress(fraction)

    def state_dict(self) -> Mapping[str, Any]:
        return self.algorithm.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.algorithm.load_state_dict(state)
