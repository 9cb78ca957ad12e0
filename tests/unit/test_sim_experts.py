"""Scripted experts solve their tasks; noise makes them imperfect but still competent."""

from __future__ import annotations

import numpy as np
import pytest
from robotrl.sim import make_env
from robotrl.sim.experts import make_expert

from robotrl.config.env import EnvConfig

IDS = ["robotrl/SO101Reach-v0", "robotrl/SO101Track-v0", "robotrl/SO101PickPlace-v0", "robotrl/SO101Avoid-v0"]


def success_rate(env_id: str, seeds: range, noise: float = 0.0) -> float:
    env = make_env(EnvConfig(id=env_id, cameras=[], privileged_state=True, max_episode_ticks=300))
    expert = make_expert(env_id, noise=noise, seed=0)
    wins = 0
    for seed in seeds:
        obs = env.reset(seed=seed)
        while True:
            result = env.step(expert.act(obs))
            obs = result.observation
            if result.terminated or result.truncated:
                break
        wins += bool(result.info["is_success"])
    env.close()
    return wins / len(seeds)


@pytest.mark.parametrize("env_id", IDS)
def test_expert_solves_a_few_seeds(env_id):
    assert success_rate(env_id, range(3)) == 1.0


@pytest.mark.slow
@pytest.mark.parametrize("env_id", IDS)
def test_expert_succeeds_on_95_percent_of_50_seeds(env_id):
    assert success_rate(env_id, range(1000, 1050)) >= 0.95


def test_noise_changes_the_actions_reproducibly():
    env = make_env(EnvConfig(id=IDS[0], cameras=[]))
    obs = env.reset(seed=0)
    clean = make_expert(IDS[0], noise=0.0, seed=0).act(obs)
    noisy_a = make_expert(IDS[0], noise=0.02, seed=7).act(obs)
    noisy_b = make_expert(IDS[0], noise=0.02, seed=7).act(obs)
    np.testing.assert_array_equal(noisy_a, noisy_b)
    assert 0.1 < np.abs(noisy_a - clean).max() < 30


def test_pick_place_expert_needs_the_cube_pose():
    env = make_env(EnvConfig(id="robotrl/SO101PickPlace-v0", cameras=[], privileged_state=False))
    with pytest.raises(ValueError, match="privileged_state"):
        make_expert("robotrl/SO101PickPlace-v0").act(env.reset(seed=0))


def test_bad_noise_is_refused():
    with pytest.raises(ValueError, match="noise"):
        make_expert(IDS[0], noise=-0.1)


def test_pick_place_expert_grasps_again_when_the_cube_slipped_away():
    from robotrl.sim.envs import SO101Env

    env = SO101Env("pick_place", privileged_state=True)
    expert = make_expert("robotrl/SO101PickPlace-v0")
    obs, _ = env.reset(seed=3)
    moved = False
    for _ in range(300):
        if expert.PHASES[expert.phase] == "close" and not moved:  # jaws about to shut: pull the cube away
            env.data.qpos[env._cube_q : env._cube_q + 2] += [0.03, 0.02]
            moved = True
        obs, _, terminated, truncated, info = env.step(expert.act(obs["state"]))
        if terminated or truncated:
            break
    assert moved and expert.regrasps == 1 and info["is_success"]
    env.close()


def test_pick_place_expert_aimed_off_misses_its_first_grasp_then_recovers():
    """``aim_offset`` moves only the first attempt: the lift leaves the cube, the expert grasps
    again at the cube itself and completes the task."""
    from robotrl.sim.envs import SO101Env

    env = SO101Env("pick_place", privileged_state=True)
    expert = make_expert("robotrl/SO101PickPlace-v0")
    expert.aim_offset = np.array([0.02, 0.0, 0.0])
    obs, _ = env.reset(seed=3)
    pending = []
    for _ in range(300):
        pending.append(expert.first_grasp_pending)
        obs, _, terminated, truncated, info = env.step(expert.act(obs["state"]))
        if terminated or truncated:
            break
    assert expert.regrasps == 1 and info["is_success"]
    assert pending[0] and not pending[-1]
