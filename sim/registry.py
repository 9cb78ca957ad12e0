"""Gymnasium ids of the SO-101 tasks, and :func:`make_env` for robotrl's own protocol."""

from __future__ import annotations

from typing import TYPE_CHECKING

import gymnasium as gym

from robotrl.config.env import EnvConfig
from robotrl.core import keys
from robotrl.core.protocols import RobotEnv

if TYPE_CHECKING:
    from robotrl.sim.envs import SO101Env

ENV_IDS: dict[str, str] = {
    "robotrl/SO101Reach-v0": "reach",
    "robotrl/SO101Track-v0": "track",
    "robotrl/SO101Avoid-v0": "avoid",
    "robotrl/SO101PickPlace-v0": "pick_place",
}
"""Gymnasium id -> task name."""


def register_envs() -> None:
    """Register every task with gymnasium (idempotent). The env enforces its own time limit."""
    for env_id, task in ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(env_id, entry_point="robotrl.sim.envs:SO101Env", kwargs={"task": task})


def task_of(env_id: str) -> str:
    if env_id not in ENV_IDS:
        raise ValueError(f"env.id: unknown sim task {env_id!r}; known: {sorted(ENV_IDS)}")
    return ENV_IDS[env_id]


def so101_env(cfg: EnvConfig, *, privileged_state: bool) -> SO101Env:
    """The gymnasium env of ``cfg``. ``privileged_state`` is not always the config's: the
    recorder's experts read the cube pose, so it always asks for it and drops it from the dataset."""
    from robotrl.sim.envs import SO101Env

    return SO101Env(
        task=task_of(cfg.id),
        control_hz=cfg.control_hz,
        max_episode_ticks=cfg.max_episode_ticks,
        cameras=tuple(cfg.cameras),
        image_size=cfg.image_size,
        privileged_state=privileged_state,
        tip_position=cfg.tip_position,
        domain_randomization=cfg.domain_randomization,
        dense_reward=cfg.dense_reward,
        scene=cfg.scene,
    )


def make_env(cfg: EnvConfig, seed_offset: int = 0) -> RobotEnv:
    """The task of ``cfg`` as a :class:`RobotEnv` (robotrl's protocol: Observation, StepResult).

    ``seed_offset`` shifts every reset seed, so several actors on one config see
    different episodes.
    """
    from robotrl.sim.robot_env import SimRobotEnv

    takeover = cfg.takeover
    # The expert standing in for a person sees the cube even when the policy may not.
    hide_from_policy = takeover.enabled and not cfg.privileged_state
    env = so101_env(cfg, privileged_state=cfg.privileged_state or hide_from_policy)
    sim: RobotEnv = SimRobotEnv(env, name=cfg.id, seed_offset=seed_offset)
    if takeover.enabled:
        from robotrl.sim.hidden_state import HiddenState
        from robotrl.sim.intervention import ExpertTakeover

        sim = ExpertTakeover(
            sim,
            cfg.id,
            takeover.ticks,
            on_miss=takeover.on_miss,
            miss_wait_ticks=takeover.miss_wait_ticks,
            before_miss=takeover.before_miss,
            reopen_only=takeover.reopen_only,
            max_corrections=takeover.max_corrections,
        )
        if hide_from_policy:
            sim = HiddenState(sim, keys.privileged)
    return sim
