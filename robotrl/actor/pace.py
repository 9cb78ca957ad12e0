"""Virtual time, online: episode k waits until the learner has published version floor(k * rate).

In virtual time the robot runs as fast as the CPU allows, so an unpaced actor may finish
all its episodes on the first weights while the learner is still warming up: the run
becomes offline learning from the starting policy's data, and how much the learner
updated per episode depends on the machine's load. A real arm gets a fixed share of
learner time per episode. ``actor.versions_per_episode`` fixes that share in the sim,
so a fine-tuning run is the same on a fast or a loaded machine. Waiting happens between
episodes (the robot is at reset), never during one.

The first version from the learner is waited for as long as the learner is up or not yet
heard from: a learner loading 1,000 demonstrations from pixels and warming up its critic took
about 4 minutes, and an actor that gave up after 2 ran 110 of its 200 episodes on its first
weights. A learner heard from and then gone without publishing (silent at two checks a
``timeout_s`` apart) is given up on; one that has published and then stops, after one
``timeout_s`` of waiting for the next version.
"""

from __future__ import annotations

import logging
import math
import threading

from robotrl.actor.inference import InProcessInference

log = logging.getLogger(__name__)


class LearnerPace:
    """Holds each episode until the learner's version catches up; gives up after one timeout."""

    def __init__(self, backend: InProcessInference, versions_per_episode: float, timeout_s: float) -> None:
        if versions_per_episode <= 0 or timeout_s <= 0:
            raise ValueError(
                f"LearnerPace: versions_per_episode and timeout_s must be > 0, "
                f"got {versions_per_episode} and {timeout_s}"
            )
        self.backend, self.rate, self.timeout_s = backend, versions_per_episode, timeout_s
        self.gave_up = False
        self._first = backend.newest_version()
        """The version the actor started with: the learner has published once a newer one came."""

    def wanted(self, episode: int) -> int:
        """The version episode ``episode`` (0-based) starts with at the least."""
        return math.floor(episode * self.rate)

    def before_episode(self, episode: int, stop: threading.Event | None = None) -> None:
        """Wait for episode ``episode``'s version; ``stop`` (Ctrl-C) ends the wait at once."""
        if self.gave_up:
            return
        want = self.wanted(episode)
        if want > self._first and not self._published() and not self._wait_for_first_version(episode, stop):
            if not _stopped(stop):
                self._give_up(episode, want, "heard from, then gone without publishing")
            return
        got = self.backend.wait_for_version(want, self.timeout_s, stop)
        if got < want and not _stopped(stop):
            self._give_up(episode, want, f"published nothing new in {self.timeout_s:.0f} s (done or down)")

    def _published(self) -> bool:
        return self.backend.newest_version() > self._first

    def _wait_for_first_version(self, episode: int, stop: threading.Event | None) -> bool:
        """Wait while the learner is up or not yet heard from; whether it published. Gone means
        silent at two checks a whole wait apart, so a learner that restarts is waited for."""
        waited_s, heard, silent_checks = 0.0, False, 0
        while not _stopped(stop):
            if self.backend.wait_for_version(self._first + 1, self.timeout_s, stop) > self._first:
                return True
            alive = self.backend.publisher_alive()
            heard = heard or alive
            silent_checks = 0 if alive else silent_checks + 1
            if heard and silent_checks >= 2:
                return False
            waited_s += self.timeout_s
            log.warning(
                "episode %d has waited %.0f s for the learner's first policy version (it may still be "
                "loading its demonstrations or warming up its critic); still waiting",
                episode,
                waited_s,
            )
        return False

    def _give_up(self, episode: int, want: int, why: str) -> None:
        self.gave_up = True
        log.warning(
            "episode %d wanted policy version %d and has %d: the learner %s; the actor runs on unpaced",
            episode,
            want,
            self.backend.newest_version(),
            why,
        )


def _stopped(stop: threading.Event | None) -> bool:
    return stop is not None and stop.is_set()
