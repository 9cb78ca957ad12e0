"""What the human beside the arm says: emergency stop, success, failure, take over.

Two sources, merged by :class:`HumanInput`: single keys typed in the actor's terminal
(works over SSH, no display needed; any readable stream can stand in for it), and the
buttons of a lerobot teleoperator that reports events (gamepad, keyboard teleop).
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger(__name__)

KEYS_HELP = "keys: [space] e-stop   s success   f failure   i take over / give back   n next episode"


@dataclass
class HumanEvents:
    """Events since the last poll; ``intervention`` is the current state, not an edge."""

    estop: bool = False
    success: bool = False
    failure: bool = False
    intervention: bool = False
    next_episode: bool = False
    """The operator has reset the scene and wants the next episode."""


class EventSource(Protocol):
    def poll(self, events: HumanEvents) -> None:
        """Add this source's events since the last poll to ``events``; never blocks."""
        ...

    def close(self) -> None: ...


class KeyEvents:
    """Single keys from a file descriptor, read by a background thread.

    ``fd`` None reads the terminal (put in cbreak mode so keys arrive without Enter);
    a test passes the read end of a pipe.
    """

    ESTOP_KEYS = frozenset(" e")

    def __init__(self, fd: int | None = None) -> None:
        self._keys: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.on_estop: Callable[[], None] | None = None
        """Called from the reader thread the moment an e-stop key arrives (before the next tick)."""
        self._fd = sys.stdin.fileno() if fd is None else fd
        self._restore: list[Any] | None = None
        if fd is None and os.isatty(self._fd):
            import termios
            import tty

            self._restore = termios.tcgetattr(self._fd)
            tty.setcbreak(self._fd)
            atexit.register(self.close)  # the terminal is given back however the actor ends
        self.intervening = False
        threading.Thread(target=self._read, name="robotrl-keys", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._fd, 64)
            except OSError:
                return
            if not data:
                return
            for ch in data.decode(errors="ignore").lower():
                if ch in self.ESTOP_KEYS and self.on_estop is not None:
                    try:
                        self.on_estop()
                    except Exception:  # the key reader must survive a failing bus
                        log.exception("emergency stop from the keyboard failed to hold the arm")
                self._keys.put(ch)

    def poll(self, events: HumanEvents) -> None:
        while True:
            try:
                key = self._keys.get_nowait()
            except queue.Empty:
                break
            if key in self.ESTOP_KEYS:
                events.estop = True
            elif key == "s":
                events.success = True
            elif key == "f":
                events.failure = True
            elif key == "n":
                events.next_episode = True
            elif key == "i":
                self.intervening = not self.intervening
                log.warning("human %s", "takes over" if self.intervening else "gives control back")
        events.intervention = events.intervention or self.intervening

    def close(self) -> None:
        if self._restore is not None:
            import termios

            termios.tcsetattr(self._fd, termios.TCSADRAIN, self._restore)
            self._restore = None


class TeleopButtonEvents:
    """Events of a lerobot teleoperator with buttons (``get_teleop_events``): gamepad, keyboard.

    lerobot's TERMINATE_EPISODE without SUCCESS counts as failure; ``estop_event`` names the
    event (a lerobot ``TeleopEvents`` value) that stops the arm, by default none.
    """

    def __init__(self, teleop: Any, estop_event: str | None = None) -> None:
        self.teleop = teleop
        self.estop_event = estop_event

    def poll(self, events: HumanEvents) -> None:
        from lerobot.teleoperators.utils import TeleopEvents

        raw = self.teleop.get_teleop_events()
        got = {getattr(k, "value", k): bool(v) for k, v in raw.items()}
        events.intervention = events.intervention or got.get(TeleopEvents.IS_INTERVENTION.value, False)
        events.success = events.success or got.get(TeleopEvents.SUCCESS.value, False)
        terminate = got.get(TeleopEvents.TERMINATE_EPISODE.value, False)
        events.failure = events.failure or got.get(TeleopEvents.FAILURE.value, False)
        events.failure = events.failure or (terminate and not events.success)
        if self.estop_event is not None and got.get(self.estop_event, False):
            events.estop = True

    def close(self) -> None:
        """The teleoperator is disconnected by its owner."""


class HumanInput:
    """All event sources, polled once per tick."""

    def __init__(self, sources: list[EventSource]) -> None:
        self.sources = sources

    def poll(self) -> HumanEvents:
        events = HumanEvents()
        for source in self.sources:
            source.poll(events)
        return events

    def close(self) -> None:
        for source in self.sources:
            source.close()
