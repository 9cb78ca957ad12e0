"""Virtual-time pacing: an online actor's episode waits for the learner's version, between episodes."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from doubles import TickPolicy

from robotrl.actor.inference import InProcessInference
from robotrl.actor.pace import LearnerPace
from robotrl.actor.slots import PolicySlots
from robotrl.config.schema import RobotRLConfig, problems
from robotrl.core.types import WeightUpdate


class Versions:
    """A weight source whose updates arrive only while waited for, in the order of ``script``:
    a version arrives at one wait; None, and every wait past the script, blocks for its whole
    timeout with nothing (a learner starting, or silent). Its publisher is heard for the first
    ``alive_waits`` waits (None: always)."""

    def __init__(self, script: list[int | None], alive_waits: int | None = None) -> None:
        self.script = list(script)
        self.waits = 0
        self.alive_waits = alive_waits

    def latest(self) -> WeightUpdate | None:
        return None

    def recv(self, timeout_s: float) -> WeightUpdate | None:
        self.waits += 1
        assert self.waits < 1000, "waited forever"  # a hang fails the test instead
        version = self.script.pop(0) if self.script else None
        if version is None:
            time.sleep(timeout_s)
            return None
        return WeightUpdate.build(version, {"bias": np.array([version], np.float32)}, subset="trainable")

    def publisher_alive(self) -> bool:
        return self.alive_waits is None or self.waits <= self.alive_waits

    def close(self) -> None:
        pass


def backend(source: Versions) -> InProcessInference:
    return InProcessInference(PolicySlots(TickPolicy(), TickPolicy()), source)


def test_an_episode_waits_for_the_version_its_number_asks_and_no_further():
    source = Versions([1, 2, 3, 4])
    pace = LearnerPace(backend(source), versions_per_episode=0.5, timeout_s=30.0)
    assert [pace.wanted(k) for k in range(5)] == [0, 0, 1, 1, 2]
    pace.before_episode(1)
    assert source.waits == 0  # version 0 is there
    pace.before_episode(6)
    assert pace.backend.newest_version() == 3 and source.waits == 3  # version 4 is not taken early
    assert not pace.gave_up


def test_a_learner_that_stopped_publishing_costs_one_timeout_then_the_actor_runs_unpaced():
    source = Versions([1])
    pace = LearnerPace(backend(source), versions_per_episode=1.0, timeout_s=0.05)
    pace.before_episode(3)
    assert pace.gave_up and pace.backend.newest_version() == 1
    waits = source.waits
    pace.before_episode(4)
    assert source.waits == waits


def test_a_learner_slow_to_publish_its_first_version_is_waited_for_past_the_timeout():
    # Loading 1,000 pixel demonstrations and warming up the critic took a learner about 4 minutes.
    source = Versions([None] * 6 + [1, 2])
    pace = LearnerPace(backend(source), versions_per_episode=1.0, timeout_s=0.05)
    pace.before_episode(1)
    assert not pace.gave_up and pace.backend.newest_version() == 1 and source.waits > 6
    pace.before_episode(3)  # published once and then stopped: one timeout, then unpaced
    assert pace.gave_up and pace.backend.newest_version() == 2


def test_a_learner_heard_from_then_gone_without_publishing_is_given_up_on():
    source = Versions([None] * 4, alive_waits=2)
    pace = LearnerPace(backend(source), versions_per_episode=1.0, timeout_s=0.05)
    pace.before_episode(1)
    assert pace.gave_up and pace.backend.newest_version() == 0


def test_a_learner_silent_for_less_than_a_whole_wait_is_still_waited_for():
    class Restarting(Versions):  # heard, silent at one check (restarting), heard, then publishes
        def publisher_alive(self) -> bool:
            return self.waits != 2

    source = Restarting([None] * 4 + [1])
    pace = LearnerPace(backend(source), versions_per_episode=1.0, timeout_s=0.05)
    pace.before_episode(1)
    assert not pace.gave_up and pace.backend.newest_version() == 1


def test_the_version_after_a_late_first_one_gets_a_whole_timeout():
    # The first version comes 0.8 s into a 1 s wait; the next one 0.5 s after it.
    source = Versions([None] * 8 + [1] + [None] * 5 + [2])
    pace = LearnerPace(backend(source), versions_per_episode=1.0, timeout_s=1.0)
    pace.before_episode(2)
    assert not pace.gave_up and pace.backend.newest_version() == 2


def test_pace_settings_are_checked():
    cfg = RobotRLConfig()
    cfg.actor.versions_per_episode = -1.0
    cfg.actor.weights_wait_s = 0.0
    fields = {f for f, _ in problems(cfg)}
    assert {"actor.versions_per_episode", "actor.weights_wait_s"} <= fields
    with pytest.raises(ValueError, match="must be > 0"):
        LearnerPace(backend(Versions([])), versions_per_episode=0.0, timeout_s=1.0)


def test_ctrl_c_ends_a_wait_at_once_without_giving_up():
    stop = threading.Event()
    stop.set()
    pace = LearnerPace(backend(Versions([])), versions_per_episode=1.0, timeout_s=600.0)
    pace.before_episode(2, stop)  # a wait of 600 s would time the test out
    assert not pace.gave_up
