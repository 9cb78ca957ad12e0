"""The expected inference delay, in ticks: a windowed high quantile of measured delays.

lerobot's tracker kept a running maximum, so one warm-up spike inflated it forever and
the queue skipped most of a chunk (docs/methods.md). Here only the last ``window``
measurements count, and a high quantile (not the maximum) ignores a lone spike even
inside the window.
"""

from __future__ import annotations

import math
from collections import deque


def seconds_to_ticks(seconds: float, control_hz: float) -> int:
    """Ticks an inference of ``seconds`` consumes: the tick at which its result is usable."""
    if seconds < 0 or not math.isfinite(seconds):
        raise ValueError(f"an inference cannot take {seconds} s")
    return math.ceil(seconds * control_hz - 1e-9)


class DelayEstimator:
    """Windowed quantile of the delays (ticks) actually consumed by recent inferences."""

    def __init__(self, window: int, quantile: float, initial_ticks: int) -> None:
        if window <= 0:
            raise ValueError(f"window must be > 0, got {window}")
        if not 0 < quantile < 1:
            raise ValueError(f"quantile must be in (0, 1), got {quantile}")
        self._delays: deque[int] = deque(maxlen=window)
        self._quantile = quantile
        self._expected = initial_ticks
        self._varies = True  # nothing measured yet: hedge

    def record(self, delay_ticks: int) -> None:
        """Add a measurement; the quantile is computed here, once per chunk, not per tick."""
        self._delays.append(delay_ticks)
        ordered = sorted(self._delays)
        rank = math.ceil(self._quantile * len(ordered)) - 1
        self._expected = ordered[max(rank, 0)]
        self._varies = ordered[0] != ordered[-1]

    def expected(self) -> int:
        """The delay to plan for: the quantile of the window (nearest rank), or the initial guess."""
        return self._expected

    def varies(self) -> bool:
        """Whether the remembered delays differ (True before the first measurement). A delay that
        has not varied needs no safety margin: asking earlier would only replan earlier."""
        return self._varies

    def __len__(self) -> int:
        return len(self._delays)
