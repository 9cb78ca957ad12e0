"""The SO-101 task environments: gymnasium API, determinism, robotrl protocol, bad input."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest
import robotrl.sim
from gymnasium.utils.env_checker import check_env
from robotrl.sim import so101
from robotrl.sim.envs import SO101Env

from robotrl.config.env import EnvConfig, TakeoverConfig
from robotrl.core.protocols import RobotEnv, StepResult
from robotrl.core.types import Observation

IDS = sorted(robotrl.sim.ENV_IDS)


@pytest.mark.parametrize("env_id", IDS)
def test_gymnasium_env_checker_passes(env_id):
    env = gym.make(env_id, cameras=("front",), image_size=32, privileged_state=True)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_action_space_is_lerobot_so101_follower():
    env = SO101Env("reach")
    assert so101.ACTION_NAMES == (
        "shoulder_pan.pos",
        "shoulder_lift.pos",
        "elbow_flex.pos",
        "wrist_flex.pos",
        "wrist_roll.pos",
        "gripper.pos",
    )
    low, high = env.action_space.low, env.action_space.high
    assert (low[5], high[5]) == (0.0, 100.0)  # gripper: 0 closed .. 100 open
    assert np.all(low[:5] < -90) and np.all(high[:5] > 90)  # degrees, zero mid-range
    np.testing.assert_allclose(so101.rad_to_units(so101.units_to_rad(high)), high, rtol=1e-6)


def rollout(env: SO101Env, seed: int, ticks: int) -> list[np.ndarray]:
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    out = [obs["state"]]
    for _ in range(ticks):
        action = obs["state"][:6] + rng.normal(0, 5, 6).astype(np.float32)
        obs, *_ = env.step(action)
        out.append(obs["state"])
    return out


@pytest.mark.parametrize("task", ["reach", "pick_place"])
def test_same_seed_same_episode(task):
    env = SO101Env(task, privileged_state=True)
    a, b, c = rollout(env, 5, 20), rollout(env, 5, 20), rollout(env, 6, 20)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], c[0])


def test_domain_randomisation_changes_the_world_and_restores_it():
    env = SO101Env("pick_place", privileged_state=True)
    env.reset(seed=1)
    mass1, rgba1 = env.model.body_mass.copy(), env.model.geom_rgba.copy()
    env.reset(seed=2)
    assert not np.array_equal(mass1, env.model.body_mass)
    assert not np.array_equal(rgba1, env.model.geom_rgba)
    env.reset(seed=1)
    np.testing.assert_array_equal(mass1, env.model.body_mass)
    plain = SO101Env("pick_place", domain_randomization=False)
    plain.reset(seed=1)
    m1 = plain.model.body_mass.copy()
    plain.reset(seed=2)
    np.testing.assert_array_equal(m1, plain.model.body_mass)


def test_wrong_shape_and_non_finite_actions_raise_clearly():
    env = SO101Env("reach")
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(6,\)"):
        env.step(np.zeros(5, dtype=np.float32))
    with pytest.raises(ValueError, match="finite"):
        env.step(np.array([0, 0, 0, np.nan, 0, 50], dtype=np.float32))


def test_out_of_range_actions_are_clipped_and_counted():
    env = SO101Env("reach")
    env.reset(seed=0)
    _, _, _, _, info = env.step(np.array([1e6, -1e6, 1e6, -1e6, 1e6, 500], dtype=np.float32))
    assert info["clipped_actions"] == 1
    for _ in range(60):
        obs, *_ = env.step(np.array([1e6, -1e6, 1e6, -1e6, 1e6, 500], dtype=np.float32))
    assert np.all(np.isfinite(obs["state"]))
    assert env.clipped_actions == 61
    joints = obs["state"][:6]
    assert np.all(joints >= so101.ACTION_LOW - 5) and np.all(joints <= so101.ACTION_HIGH + 5)
    env.reset(seed=0)
    assert env.clipped_actions == 0


def test_time_limit_truncates():
    env = SO101Env("reach", max_episode_ticks=5)
    obs, _ = env.reset(seed=0)
    hold = obs["state"][:6]
    flags = [env.step(hold)[3] for _ in range(5)]
    assert flags == [False] * 4 + [True]


def test_holding_the_pose_keeps_the_arm_still():
    """Position control: commanding the observed pose keeps the joints there (units agree)."""
    env = SO101Env("reach", domain_randomization=False)
    obs, _ = env.reset(seed=0)
    start = obs["state"][:6].copy()
    for _ in range(30):
        obs, *_ = env.step(start)
    np.testing.assert_allclose(obs["state"][:5], start[:5], atol=3.0)


def test_make_env_speaks_the_robotrl_protocol():
    cfg = EnvConfig(id="robotrl/SO101PickPlace-v0", cameras=["front", "wrist"], image_size=48)
    env = robotrl.sim.make_env(cfg, seed_offset=100)
    assert isinstance(env, RobotEnv)
    spec = env.spec
    assert spec.action_dim == 6 and spec.camera_shapes == {"front": (48, 48, 3), "wrist": (48, 48, 3)}
    assert spec.state_dim == 15 and spec.instruction
    obs = env.reset(seed=0)
    assert isinstance(obs, Observation) and obs.tick == 0
    assert obs.state.dtype == np.float32 and obs.state.shape == (15,)
    for cam in ("front", "wrist"):
        img = obs.images[cam]
        assert img.dtype == np.uint8 and img.shape == (48, 48, 3)
        assert img.std() > 5  # a real rendered scene, not a blank frame
    result = env.step(obs.state[:6])
    assert isinstance(result, StepResult) and result.observation.tick == 1
    assert result.info["is_success"] is False
    other = robotrl.sim.make_env(cfg, seed_offset=0)
    assert not np.array_equal(other.reset(seed=0).state, obs.state)  # offset shifts the seed
    env.close()
    other.close()


def test_unknown_task_or_camera_is_refused():
    with pytest.raises(ValueError, match=r"env\.id"):
        robotrl.sim.make_env(EnvConfig(id="robotrl/Nope-v0"))
    with pytest.raises(ValueError, match="cameras"):
        SO101Env("reach", cameras=("top",))


def test_tip_position_comes_last_in_the_state_and_follows_the_arm():
    env = SO101Env("pick_place", privileged_state=True, tip_position=True)
    assert env.state_names[-3:] == ("tip.x", "tip.y", "tip.z") and len(env.state_names) == 25
    obs, _ = env.reset(seed=0)
    np.testing.assert_allclose(obs["state"][-3:], env.ee_pos, atol=1e-6)
    before = obs["state"][-3:].copy()
    target = obs["state"][:6].copy()
    target[0] += 20.0  # pan the shoulder: the tip swings sideways
    for _ in range(20):
        obs, *_ = env.step(target)
    np.testing.assert_allclose(obs["state"][-3:], env.ee_pos, atol=1e-6)
    assert np.linalg.norm(obs["state"][-3:] - before) > 0.02
    env.close()


def _pick_place_until(env: SO101Env, seed: int, phase: str):
    """Drive the scripted expert until it starts ``phase``; returns (last observation, last action)."""
    from robotrl.sim.experts import make_expert

    expert = make_expert("robotrl/SO101PickPlace-v0")
    obs, _ = env.reset(seed=seed)
    action = obs["state"][:6]
    while expert.PHASES[expert.phase] != phase:
        action = expert.act(obs["state"])
        obs, _, terminated, truncated, _ = env.step(action)
        assert not (terminated or truncated)
    return obs, action


def _hold_to_the_end(env: SO101Env, action) -> dict:
    while True:
        _, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return info


def test_an_episode_says_how_it_ended_on_its_last_step():
    from robotrl.sim.envs import OUTCOME_TIMEOUT

    env = SO101Env("reach", max_episode_ticks=5)
    obs, _ = env.reset(seed=0)
    infos = [env.step(obs["state"][:6])[4] for _ in range(5)]
    assert [i.get("outcome") for i in infos] == [None] * 4 + [OUTCOME_TIMEOUT]


def test_pick_place_outcomes_tell_a_missed_grasp_from_a_drop_and_a_hold():
    from robotrl.sim.envs import (
        OUTCOME_CUBE_DROPPED,
        OUTCOME_CUBE_HELD,
        OUTCOME_CUBE_UNTOUCHED,
        OUTCOME_SUCCESS,
    )

    env = SO101Env("pick_place", privileged_state=True, max_episode_ticks=200)
    obs, _ = env.reset(seed=3)
    assert _hold_to_the_end(env, obs["state"][:6])["outcome"] == OUTCOME_CUBE_UNTOUCHED

    _, action = _pick_place_until(env, seed=3, phase="carry")  # lifted: keep it in the air
    assert _hold_to_the_end(env, action)["outcome"] == OUTCOME_CUBE_HELD

    _, action = _pick_place_until(env, seed=3, phase="carry")  # lifted, then let go where it is
    opened = np.array(action, copy=True)
    opened[5] = so101.rad_to_units(np.full(6, 0.8))[5]
    assert _hold_to_the_end(env, opened)["outcome"] == OUTCOME_CUBE_DROPPED

    from robotrl.sim.experts import make_expert

    expert = make_expert("robotrl/SO101PickPlace-v0")
    obs, _ = env.reset(seed=3)
    while True:
        obs, _, terminated, truncated, info = env.step(expert.act(obs["state"]))
        if terminated or truncated:
            break
    assert info["is_success"] and info["outcome"] == OUTCOME_SUCCESS
    env.close()


@pytest.mark.parametrize(
    ("success", "moved", "lifted", "held", "outcome"),
    [
        (True, True, True, False, "success"),
        (False, False, False, False, "cube never moved"),
        (False, True, False, False, "cube pushed, never lifted"),
        (False, True, True, False, "cube lifted, left outside the zone"),
        (False, True, True, True, "cube still held"),
        (False, True, False, True, "cube still held"),
    ],
)
def test_pick_place_outcome_names(success, moved, lifted, held, outcome):
    from robotrl.sim.envs import pick_place_outcome

    assert pick_place_outcome(success, moved, lifted, held) == outcome


def test_a_scripted_takeover_drives_from_its_tick_and_reports_it_as_an_intervention():
    from robotrl.sim import make_env

    cfg = EnvConfig(
        id="robotrl/SO101PickPlace-v0", cameras=[], privileged_state=True, takeover=TakeoverConfig(ticks=5)
    )
    env = make_env(cfg)
    obs = env.reset(seed=3)
    hold = np.array(obs.state[:6], copy=True)
    steps = []
    while True:
        step = env.step(hold)  # the policy would hold still; the "person" takes over at tick 5
        steps.append(step)
        if step.terminated or step.truncated:
            break
    flags = [bool(s.info.get("intervention", False)) for s in steps]
    assert flags[:5] == [False] * 5 and all(flags[5:])
    assert "executed" not in steps[4].info and not np.array_equal(steps[5].info["executed"], hold)
    assert steps[-1].info["is_success"] and steps[-1].info["outcome"] == "success"
    again = env.reset(seed=3)  # a new episode starts with the policy driving again
    assert "intervention" not in env.step(np.array(again.state[:6])).info
    env.close()


@pytest.mark.parametrize("wait", [0, 20])
def test_a_missed_grasp_is_corrected_by_the_expert_who_hands_back_once_the_cube_is_up(wait: int):
    from robotrl.sim import make_env
    from robotrl.sim.envs import CUBE_LIFTED

    cfg = EnvConfig(
        id="robotrl/SO101PickPlace-v0",
        cameras=[],
        privileged_state=True,
        takeover=TakeoverConfig(on_miss=True, miss_wait_ticks=wait),
    )
    env = make_env(cfg)
    obs = env.reset(seed=3)
    hold = np.array(obs.state[:6], copy=True)
    for _ in range(3):  # the policy holds still with its jaws open: nobody steps in
        assert "intervention" not in env.step(hold).info
    shut = hold.copy()
    shut[5] = 0.0  # ... then shuts its jaws far from the cube: a missed grasp
    flags, cube_z = [], []
    for _ in range(200):
        step = env.step(shut)
        flags.append(bool(step.info.get("intervention", False)))
        cube_z.append(float(step.observation.state[17]))
        if step.terminated or step.truncated:
            break
    took_over = flags.index(True)  # as soon as the jaws are shut, or once they stayed shut `wait` ticks
    handed_back = flags.index(False, took_over)
    assert (
        wait < took_over < wait + 10 and handed_back > took_over + 10
    )  # the expert drove, then handed back ...
    assert cube_z[handed_back - 1] > CUBE_LIFTED  # ... with the cube lifted
    assert not any(flags[handed_back:])  # once per episode: what the policy does next is its own
    env.close()


def _shutting_jaws_on_air_under_a_takeover(**takeover: bool | int) -> list[StepResult]:
    """A policy that shuts its jaws far from the cube at every tick it drives (a missed grasp,
    then another after every hand-back), under an on-miss takeover: the episode's steps."""
    from robotrl.sim import make_env

    cfg = EnvConfig(
        id="robotrl/SO101PickPlace-v0",
        cameras=[],
        privileged_state=True,
        takeover=TakeoverConfig(on_miss=True, **takeover),  # type: ignore[arg-type]
    )
    env = make_env(cfg)
    obs = env.reset(seed=3)
    shut = np.array(obs.state[:6], copy=True)
    shut[5] = 0.0
    steps = [env.step(shut)]
    while not (steps[-1].terminated or steps[-1].truncated):
        steps.append(env.step(shut))
    env.close()
    return steps


def test_a_reopen_only_takeover_hands_back_with_the_jaws_open_above_the_cube():
    from robotrl.sim.envs import CUBE_LIFTED
    from robotrl.sim.intervention import JAWS_OPEN
    from robotrl.sim.scene import CUBE_HALF

    steps = _shutting_jaws_on_air_under_a_takeover(reopen_only=True)
    flags = [bool(s.info.get("intervention", False)) for s in steps]
    took_over = flags.index(True)
    handed_back = flags.index(False, took_over)
    state = np.asarray(steps[handed_back - 1].observation.state)
    assert took_over < 10 and handed_back > took_over + 5  # the expert re-opened and rose ...
    assert state[5] > JAWS_OPEN and state[17] < CUBE_LIFTED  # ... jaws open, cube still down ...
    assert float(state[17]) == pytest.approx(CUBE_HALF, abs=0.01)
    assert not any(flags[handed_back:])  # ... and the second grasp is the policy's own,
    assert float(steps[-1].observation.state[5]) < JAWS_OPEN  # which misses again


@pytest.mark.parametrize("max_corrections", [1, 2])
def test_the_expert_corrects_at_most_max_corrections_grasps_per_episode(max_corrections: int):
    steps = _shutting_jaws_on_air_under_a_takeover(
        reopen_only=True,  # short takeovers: several fit in one episode
        max_corrections=max_corrections,
    )
    flags = [bool(s.info.get("intervention", False)) for s in steps]
    takeovers = sum(1 for before, now in zip([False, *flags], flags, strict=False) if now and not before)
    assert takeovers == max_corrections


def _grasp_under_a_takeover_before_a_miss(high_by: float, aside_by: float) -> tuple[list, list]:
    """The scripted expert plays the policy, closing its first grasp ``high_by`` m above the cube's
    centre and ``aside_by`` m to one side: (intervention flags, cube heights) per tick."""
    from robotrl.sim import make_env
    from robotrl.sim.experts import PickPlaceExpert
    from robotrl.sim.scene import CUBE_HALF

    class Policy(PickPlaceExpert):
        def _move_towards(self, goal: np.ndarray) -> float:
            floor = CUBE_HALF + (high_by if self.regrasps == 0 else 0.0)
            return super()._move_towards(np.array([goal[0], goal[1], max(goal[2], floor)]))

    cfg = EnvConfig(
        id="robotrl/SO101PickPlace-v0",
        cameras=[],
        privileged_state=True,
        takeover=TakeoverConfig(before_miss=True),
    )
    env = make_env(cfg)
    policy = Policy(noise=0.0, seed=0)
    policy.aim_offset = np.array([aside_by, 0.0, 0.0])
    obs = env.reset(seed=3)
    flags, cube_z = [], []
    for _ in range(300):
        step = env.step(policy.act(obs))
        obs = step.observation
        flags.append(bool(step.info.get("intervention", False)))
        cube_z.append(float(obs.state[17]))
        if step.terminated or step.truncated:
            break
    env.close()
    return flags, cube_z


@pytest.mark.parametrize(("high_by", "aside_by"), [(0.02, 0.0), (0.0, 0.03)])
def test_a_grasp_closing_off_the_cube_is_corrected_before_it_misses(high_by, aside_by):
    """Too high, the expert descends straight onto the cube; to one side, it comes from above."""
    from robotrl.sim.envs import CUBE_LIFTED

    flags, cube_z = _grasp_under_a_takeover_before_a_miss(high_by, aside_by)
    took_over = flags.index(True)
    handed_back = flags.index(False, took_over)
    assert max(cube_z[:took_over]) < CUBE_LIFTED  # before the (missed) lift
    assert handed_back > took_over + 5 and cube_z[handed_back - 1] > CUBE_LIFTED  # lifted, handed back
    assert not any(flags[handed_back:])  # once per episode


def test_a_grasp_closing_on_the_cube_is_left_alone():
    flags, _ = _grasp_under_a_takeover_before_a_miss(0.0, 0.0)
    assert not any(flags)


def test_a_takeover_without_the_cube_pose_corrects_the_grasp_from_the_sims_pose_hidden_from_the_policy():
    """``env.privileged_state=false`` with takeovers: the expert (a person at the arm) still sees
    the cube, the policy's observations and spec never hold a cube column, and the cameras pass."""
    from robotrl.sim import make_env

    cfg = EnvConfig(
        id="robotrl/SO101PickPlace-v0",
        cameras=["front"],
        image_size=32,
        privileged_state=False,
        takeover=TakeoverConfig(on_miss=True),
    )
    env = make_env(cfg)
    plain = make_env(dataclasses.replace(cfg, takeover=TakeoverConfig()))
    assert env.spec == plain.spec and not any(n.startswith("cube.") for n in env.spec.state_names)
    obs = env.reset(seed=3)
    assert obs.state.shape == (len(env.spec.state_names),) and obs.images["front"].shape == (32, 32, 3)
    shut = np.array(obs.state[:6], copy=True)
    shut[5] = 0.0  # jaws shut far from the cube: a missed grasp
    steps = [env.step(shut) for _ in range(60)]
    assert any(s.info.get("intervention", False) for s in steps), "the expert never took over"
    assert all(s.observation.state.shape == obs.state.shape for s in steps)
    env.close()
    plain.close()
