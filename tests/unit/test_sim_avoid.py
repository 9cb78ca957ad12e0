"""The avoid task: reach the target around an obstacle on either side; the fingertip inside the
keep-out ends the episode as a failure. Its expert is bimodal (a side per episode)."""

from __future__ import annotations

import numpy as np
import pytest
from robotrl.sim import make_env
from robotrl.sim.envs import OBSTACLE_KEEP_OUT, SO101Env
from robotrl.sim.experts import AVOID_DETOUR, AvoidExpert, detour, make_expert

from robotrl.config.env import EnvConfig

AVOID = "robotrl/SO101Avoid-v0"


def test_state_names_the_obstacle():
    env = SO101Env("avoid")
    assert env.state_names[12:] == ("goal.x", "goal.y", "goal.z", "obstacle.x", "obstacle.y", "obstacle.z")


def test_obstacle_lies_between_the_start_and_the_target():
    env = SO101Env("avoid")
    for seed in range(5):
        obs, _ = env.reset(seed=seed)
        start, goal, obstacle = env.ee_pos, obs["state"][12:15], obs["state"][15:18]
        assert np.sign(start[1]) == -np.sign(goal[1])  # the target is on the other side
        way = goal - start
        frac = float((obstacle - start) @ way / (way @ way))
        assert 0.3 < frac < 0.75
        np.testing.assert_allclose(obstacle, start + frac * way, atol=1e-6)  # on the straight line


def run_expert(env, expert, seed):
    obs = env.reset(seed=seed)
    clearance = np.inf
    while True:
        result = env.step(expert.act(obs))
        clearance = min(clearance, float(np.linalg.norm(env.env.ee_pos - env.env.obstacle_pos)))
        obs = result.observation
        if result.terminated or result.truncated:
            return result, clearance


def test_expert_goes_round_on_both_sides_and_never_touches():
    env = make_env(EnvConfig(id=AVOID, cameras=[]))
    expert = make_expert(AVOID, seed=0)
    sides = []
    for seed in range(8):
        result, clearance = run_expert(env, expert, seed)
        assert result.info["is_success"] and not result.info["touched_obstacle"]
        assert clearance > OBSTACLE_KEEP_OUT + 0.01
        sides.append(expert.side)
    assert set(sides) == {-1.0, 1.0}


def test_a_straight_reach_touches_the_obstacle_and_fails():
    env = make_env(EnvConfig(id=AVOID, cameras=[]))
    expert = make_expert("robotrl/SO101Reach-v0")  # straight at the target, through the obstacle
    result, _ = run_expert(env, expert, seed=2)
    assert result.terminated and not result.info["is_success"] and result.info["touched_obstacle"]
    assert result.info["tick"] < env.env.max_episode_ticks


def test_detour_is_a_half_circle_on_the_chosen_side():
    start, goal, obstacle = (
        np.array([0.2, 0.1, 0.05]),
        np.array([0.2, -0.2, 0.05]),
        np.array([0.2, -0.05, 0.05]),
    )
    left, right = detour(start, goal, obstacle, 1.0), detour(start, goal, obstacle, -1.0)
    for way in (left, right):
        np.testing.assert_allclose([np.linalg.norm(p - obstacle) for p in way[:-1]], AVOID_DETOUR)
        np.testing.assert_array_equal(way[-1], goal)
    assert left[4][0] - obstacle[0] == pytest.approx(-(right[4][0] - obstacle[0]))
    assert abs(left[4][0] - obstacle[0]) == pytest.approx(AVOID_DETOUR)


def test_the_avoid_expert_needs_the_obstacle():
    with pytest.raises(ValueError, match="obstacle"):
        AvoidExpert(0.0, 0).act(np.zeros(15, np.float32))
