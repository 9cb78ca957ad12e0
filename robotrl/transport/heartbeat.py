"""Liveness of a peer from the messages it sends: the Paranoid Pirate rule.

A link sends a heartbeat every ``period_s`` and declares its peer dead after
``timeout_s`` without hearing anything from it. Time comes from an injected
clock so the rule is tested exactly, without sleeping.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

Now = Callable[[], float]


@dataclass
class Liveness:
    """Tracks when a peer was last heard from and when our next heartbeat is due."""

    period_s: float
    timeout_s: float
    now: Now
    last_heard: float | None = None
    _next_beat: float = field(default=float("-inf"))

    def __post_init__(self) -> None:
        if self.period_s <= 0 or self.timeout_s <= self.period_s:
            raise ValueError(f"need 0 < period_s < timeout_s, got {self.period_s}, {self.timeout_s}")

    def heard(self) -> None:
        """Any message from the peer counts as a sign of life."""
        self.last_heard = self.now()

    def alive(self) -> bool:
        """True while the peer was heard from within ``timeout_s``."""
        return self.last_heard is not None and self.now() - self.last_heard <= self.timeout_s

    def beat_due(self) -> bool:
        """True (and re-arms) when our own heartbeat should go out now."""
        t = self.now()
        if t >= self._next_beat:
            self._next_beat = t + self.period_s
            return True
        return False

    def ms_to_beat(self) -> int:
        """Milliseconds until our next heartbeat is due (0: due now), rounded up."""
        return max(0, math.ceil((self._next_beat - self.now()) * 1000)) if self._next_beat > -math.inf else 0

    def forget(self) -> None:
        """Start over, e.g. after rebuilding the socket: the peer is unknown again."""
        self.last_heard = None
        self._next_beat = float("-inf")
