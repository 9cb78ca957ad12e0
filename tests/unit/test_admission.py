"""Admission at ingest: which batches the learner refuses, how it counts them, how often it says so."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
from learner_doubles import episode_batch, toy_spec

from robotrl.config.learner import GuardConfig
from robotrl.core.types import EnvSpec
from robotrl.learner.admission import MAX_COUNTED_ACTORS, OTHER_ACTORS, Admission, ValueBounds

SPEC = toy_spec()  # actions in [-1, 1], episodes of at most 20 ticks
STREAM = "stream-a"


def quiet_batch(episode: int, ticks: range, actor: str = "a"):
    """A batch whose actions lie inside the toy spec's bounds."""
    batch = episode_batch(actor, episode, ticks, end=None)
    return dataclasses.replace(batch, action=np.zeros_like(batch.action))


def admission(clock=lambda: 0.0, **guard: float) -> Admission:
    return Admission(ValueBounds.of(SPEC, GuardConfig(**guard)), clock=clock)  # type: ignore[arg-type]


def test_values_inside_the_bounds_pass_and_each_bound_refuses_for_its_reason():
    gate = admission()
    ok = quiet_batch(0, range(5))
    assert gate.problem(ok, STREAM, 0, newest_version=0) is None
    cases = {
        "reward": dataclasses.replace(ok, reward=np.full(5, 3e38, np.float32)),
        "state": dataclasses.replace(ok, state=np.full((5, 2), 1e9, np.float32)),
        "action": dataclasses.replace(ok, action=np.full((5, 3), 1.25, np.float32)),  # margin 0.1 of 2
        "policy_version": dataclasses.replace(ok, policy_version=np.full(5, -5, np.int64)),
    }
    for reason, batch in cases.items():
        problem = gate.problem(batch, STREAM, 0, newest_version=0)
        assert problem is not None and problem[0] == reason
    edge = dataclasses.replace(ok, action=np.full((5, 3), 1.15, np.float32))
    assert gate.problem(edge, STREAM, 0, newest_version=0) is None  # within the margin


def test_policy_versions_pass_from_none_to_the_newest_known_and_no_further():
    gate = admission()
    ok = quiet_batch(0, range(3))
    for versions, newest, admitted in (([-1, 0, 3], 3, True), ([4, 4, 4], 3, False), ([-2, 0, 0], 3, False)):
        batch = dataclasses.replace(ok, policy_version=np.array(versions, np.int64))
        assert (gate.problem(batch, STREAM, 0, newest) is None) is admitted


def test_ticks_must_lie_in_the_episode_and_rise_except_in_a_late_resend():
    gate = admission()
    assert gate.problem(quiet_batch(0, range(18, 22)), STREAM, 0, 0)[0] == "tick"  # type: ignore[index]
    backwards = dataclasses.replace(quiet_batch(0, range(3)), tick=np.array([2, 1, 0], np.int64))
    assert gate.problem(backwards, STREAM, 0, 0)[0] == "tick"  # type: ignore[index]
    assert gate.admit(quiet_batch(0, range(5, 10)), STREAM, seq=2, newest_version=0)
    assert not gate.admit(
        quiet_batch(0, range(0, 5)), STREAM, seq=3, newest_version=0
    )  # later, yet earlier ticks
    assert gate.admit(quiet_batch(0, range(0, 5)), STREAM, seq=1, newest_version=0)  # a resend arriving late
    assert gate.admit(quiet_batch(1, range(0, 5)), STREAM, seq=4, newest_version=0)  # a new episode
    assert gate.admit(quiet_batch(0, range(0, 5)), "stream-b", seq=0, newest_version=0)  # a restarted actor


def test_refusals_are_counted_per_actor_and_logged_at_most_once_per_interval(caplog):
    now = [0.0]
    gate = admission(clock=lambda: now[0])
    absurd = dataclasses.replace(
        quiet_batch(0, range(3), actor="hostile"), reward=np.full(3, 3e38, np.float32)
    )
    with caplog.at_level(logging.WARNING, logger="robotrl.learner.admission"):
        for seq in range(100):
            assert not gate.admit(absurd, STREAM, seq, newest_version=0)
        now[0] = 10.0
        assert not gate.admit(absurd, STREAM, 100, newest_version=0)
    assert gate.refused == {"hostile": {"reward": 101}}
    assert len(caplog.records) == 2 and "hostile" in caplog.records[0].getMessage()
    assert gate.counts()["refused_reward"] == 101 and gate.counts()["refused_tick"] == 0


def test_an_unbounded_action_dimension_stays_unbounded():
    spec = EnvSpec("free", ("a0",), (-np.inf,), (np.inf,), ("s0",), max_episode_ticks=10)
    bounds = ValueBounds.of(spec, GuardConfig())
    assert bounds.action_low[0] == -np.inf and bounds.action_high[0] == np.inf


def test_refusals_of_more_actors_than_counted_apart_share_one_entry():
    gate = admission()
    absurd = dataclasses.replace(quiet_batch(0, range(3)), reward=np.full(3, 3e38, np.float32))
    for i in range(MAX_COUNTED_ACTORS + 50):
        assert not gate.admit(dataclasses.replace(absurd, actor_id=f"fake-{i}"), STREAM, 0, newest_version=0)
    assert len(gate.refused) == MAX_COUNTED_ACTORS + 1 and gate.refused[OTHER_ACTORS]["reward"] == 50
