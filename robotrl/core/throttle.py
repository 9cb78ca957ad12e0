"""Log lines a peer can trigger at will, held to one per interval.

A refused message may be repeated as fast as a peer cares to send it; logging each one
would let that peer fill the disk and bury every other line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class ThrottledLog:
    """At most one line per ``interval_s``; the next one says how many were held back."""

    def __init__(
        self, logger: logging.Logger, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._log, self._interval_s, self._clock = logger, interval_s, clock
        self._quiet_until: float | None = None
        self._held_back = 0

    def warning(self, message: str, *args: object) -> None:
        now = self._clock()
        if self._quiet_until is not None and now < self._quiet_until:
            self._held_back += 1
            return
        if self._held_back:
            message, args = f"{message} (and %d like it not logged)", (*args, self._held_back)
        self._log.warning(message, *args)
        self._held_back = 0
        self._quiet_until = now + self._interval_s
