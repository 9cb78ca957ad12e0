"""The last check before a command reaches the robot: clip to the action bounds, count clamps.

The sim needs no more than this; the real arm's safety layer (rate limits, watchdog,
emergency stop) is the Hardware issue's and wraps the same call.
"""

from __future__ import annotations

import numpy as np

from robotrl.core.types import EnvSpec, FloatArray


class ActionClipper:
    def __init__(self, spec: EnvSpec) -> None:
        self._low, self._high = spec.action_bounds()
        self.clamped_ticks = 0

    def __call__(self, action: FloatArray) -> FloatArray:
        clipped: FloatArray = np.clip(action, self._low, self._high).astype(np.float32, copy=False)
        if not np.array_equal(clipped, action):
            self.clamped_ticks += 1
        return clipped
