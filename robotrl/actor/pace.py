"""Virtual time, online: episode k waits until the learner has published version floor(k * rate).

In virtual time the robot runs as fast as the CPU allows, so an unpaced actor may finish
all its episodes on the first weights while the learner is still warming up: the run
becomes offline learning from the starting policy's data, and how much the learner
updated per episode depends on the machine's load. A real arm gets a fixed share of
learner time per episode. ``actor.versions_per_episode`` fixes that share in the sim,
so a fine-tuning run is the same on a fast or a loaded machine. Waiting happens between
episodes (the robot is at reset), never during one.

The first version from the learner is waited for as long as the learner takes: a learner
loading 1,000 demonstrations from pixels and warming up its critic took over 2 minutes, and an
actor that gave up on it then ran all its episodes on its first weights. Only a learner that
has published and then stops is given up on, after one ``timeout_s``.
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
        waited_s = 0.0
        got = self.backend.wait_for_version(want, self.timeout_s, stop)
        while got == self._first < want and not (stop is not None and stop.is_set()):
            waited_s += self.timeout_s
            log.warning(
                "episode %d has waited %.0f s for the learner's first policy version (it may still be "
                "loading its demonstrations or warming up its critic); still waiting",
                episode,
                waited_s,
            )
            got = self.backend.wait_for_version(want, self.timeout_s, stop)
        if got < want and not (stop is not None and stop.is_set()):
            self.gave_up = True
            log.warning(
                "episode %d waited %.0f s for policy version %d and has %d: the learner has stopped "
                "publishing (done or down); the actor runs on unpaced",
                episode,
                self.timeout_s,
                want,
                got,
            )
