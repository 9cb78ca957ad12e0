"""One log line per period for an event that may repeat thousands of times a second."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class EveryFewSeconds:
    """Logs an event at most once per ``period_s``, with how many it stands for.

    A full disk refuses every batch; a line per batch would bury the one that says why."""

    def __init__(
        self,
        logger: logging.Logger,
        level: int,
        period_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger, self._level, self._period_s, self._clock = logger, level, period_s, clock
        self._last: float | None = None
        self._since_last = 0
        self.total = 0
        """Events in all, logged or not."""

    def event(self, message: str, *args: object) -> None:
        """Count one event; log ``message % args`` if the last line is ``period_s`` old."""
        self.total += 1
        self._since_last += 1
        now = self._clock()
        if self._last is not None and now - self._last < self._period_s:
            return
        self._logger.log(
            self._level,
            message + " (%d times since the last such line, %d in all)",
            *args,
            self._since_last,
            self.total,
        )
        self._last, self._since_last = now, 0
