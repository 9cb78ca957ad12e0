"""The tracking task: a target circling at a known speed, observed with its velocity; success
needs the fingertip on it for TRACK_HOLD_TICKS consecutive ticks."""

from __future__ import annotations

import numpy as np
import pytest
from robotrl.sim import make_env
from robotrl.sim.envs import TRACK_HOLD_TICKS, TRACK_OMEGA, SO101Env
from robotrl.sim.experts import make_expert, predict_target

from robotrl.config.env import EnvConfig

TRACK = "robotrl/SO101Track-v0"


def test_state_names_the_target_velocity():
    env = SO101Env("track")
    assert env.state_names[12:] == ("goal.x", "goal.y", "goal.z", "goal.vx", "goal.vy", "goal.vz")


def test_target_moves_on_a_circle_with_the_observed_velocity():
    env = SO101Env("track", max_episode_ticks=100)
    obs, _ = env.reset(seed=3)
    still = obs["state"][:6]
    states = [obs["state"]]
    for _ in range(40):
        obs, *_ = env.step(still)
        states.append(obs["state"])
    pos = np.array([s[12:15] for s in states], np.float64)
    vel = np.array([s[15:18] for s in states], np.float64)
    dt = 1.0 / env.control_hz
    central = (pos[2:] - pos[:-2]) / (2 * dt)
    np.testing.assert_allclose(central, vel[1:-1], atol=2e-3)  # the state's velocity is the motion's
    speed = np.linalg.norm(vel, axis=1)
    assert speed.min() > 0.04 * TRACK_OMEGA and speed.max() < 0.08 * TRACK_OMEGA
    assert np.ptp(pos[:, 2]) < 1e-6  # a horizontal circle


@pytest.mark.parametrize("ahead_s", [0.0, 0.2, 1.0])
def test_position_and_velocity_predict_the_path(ahead_s):
    env = SO101Env("track", max_episode_ticks=100)
    obs, _ = env.reset(seed=11)
    s0 = obs["state"].astype(np.float64)
    for _ in range(round(ahead_s * env.control_hz)):
        obs, *_ = env.step(s0[:6])
    predicted = predict_target(s0[12:15], s0[15:18], ahead_s)
    np.testing.assert_allclose(predicted, obs["state"][12:15], atol=1e-5)


def test_a_still_arm_never_succeeds():
    env = make_env(EnvConfig(id=TRACK, cameras=[], max_episode_ticks=120))
    obs = env.reset(seed=0)
    hold = obs.state[:6].copy()
    for _ in range(120):
        result = env.step(hold)
        assert not result.terminated
    assert result.truncated and not result.info["is_success"]


def test_success_needs_the_hold_and_resets_the_count_when_off_target():
    env = make_env(EnvConfig(id=TRACK, cameras=[], max_episode_ticks=240))
    expert = make_expert(TRACK)
    obs = env.reset(seed=4)
    counts = []
    while True:
        result = env.step(expert.act(obs))
        counts.append(result.info["on_target_ticks"])
        obs = result.observation
        if result.terminated or result.truncated:
            break
    assert result.terminated and result.info["is_success"]
    assert counts[-1] == TRACK_HOLD_TICKS
    assert counts[-TRACK_HOLD_TICKS:] == list(range(1, TRACK_HOLD_TICKS + 1))
    assert counts[0] == 0  # the episode starts away from the target


def test_the_tracking_expert_needs_the_target_velocity():
    with pytest.raises(ValueError, match="velocity"):
        make_expert(TRACK).act(np.zeros(15, np.float32))
