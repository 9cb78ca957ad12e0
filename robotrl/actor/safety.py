"""The last check before a command reaches the robot: clip to the action bounds, count clamps.

The sim needs no more than this. A real arm's env (:mod:`robotrl.hardware.env`) passes
every command it sends, the human's included, through its own safety layer as well
(joint limits, rate and speed limits, workspace box, watchdog, emergency stop).
"""

from __future__ import annotations

import numpy as np

from robotrl.core.types import EnvSpec, FloatArray


class ActionClipper:
    def __init__(self, spec: EnvSpec) -> None:
        self._low, self._high = spec.action_bounds()
        self.clamped_ticks = 0

    def bound(self, actions: FloatArray) -> FloatArray:
        """``actions`` (one or many rows) clipped to the bounds, uncounted: what the robot will do."""
        clipped: FloatArray = np.clip(actions, self._low, self._high).astype(np.float32, copy=False)
        return clipped

    def __call__(self, action: FloatArray) -> FloatArray:
        clipped = self.bound(action)
        if not np.array_equal(clipped, action):
            self.clamped_ticks += 1
        return clipped
