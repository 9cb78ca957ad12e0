"""The simulated SO-101 as a lerobot :class:`~lerobot.robots.robot.Robot`.

It speaks exactly what lerobot's ``so101_follower`` speaks (``<joint>.pos`` in
degrees, gripper 0..100, one entry per camera), so lerobot's record, teleoperate and
asynchronous-inference client drive the sim as they drive the real arm. Each
``send_action`` advances the physics by one control tick; lerobot's loop sets the pace.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from lerobot.robots.robot import Robot
from lerobot.utils.errors import DeviceAlreadyConnectedError, DeviceNotConnectedError
from robotrl.sim import so101
from robotrl.sim.config_so101_sim import SO101SimConfig
from robotrl.sim.envs import SO101Env
from robotrl.sim.registry import task_of


class SO101Sim(Robot):  # type: ignore[misc]  # lerobot is untyped
    """A MuJoCo SO-101 behind lerobot's Robot interface."""

    config_class = SO101SimConfig
    name = "robotrl_so101_sim"

    def __init__(self, config: SO101SimConfig) -> None:
        super().__init__(config)
        self.config = config
        task_of(config.task)  # a clear error for an unknown task, before connect
        self.env: SO101Env | None = None

    @property
    def observation_features(self) -> dict[str, Any]:
        size = self.config.image_size
        features: dict[str, Any] = dict.fromkeys(so101.ACTION_NAMES, float)
        features.update({cam: (size, size, 3) for cam in self.config.sim_cameras})
        return features

    @property
    def action_features(self) -> dict[str, Any]:
        return dict.fromkeys(so101.ACTION_NAMES, float)

    @property
    def is_connected(self) -> bool:
        return self.env is not None

    @property
    def is_calibrated(self) -> bool:
        return True  # the sim's joints are calibrated by construction

    def connect(self, calibrate: bool = True) -> None:
        if self.env is not None:
            raise DeviceAlreadyConnectedError(f"{self} is already connected")
        c = self.config
        self.env = SO101Env(
            task=task_of(c.task),
            control_hz=c.control_hz,
            cameras=tuple(c.sim_cameras),
            image_size=c.image_size,
            domain_randomization=c.domain_randomization,
            scene=c.scene,
            max_episode_ticks=10**9,  # lerobot's tools decide when an episode ends
        )
        self.env.reset(seed=c.seed)

    def calibrate(self) -> None:
        """Nothing to calibrate in simulation."""

    def configure(self) -> None:
        """Nothing to configure in simulation."""

    def reset(self, seed: int | None = None) -> None:
        """Start a new scene (objects, randomisation); lerobot's tools call this between episodes if asked."""
        self._env().reset(seed=seed)

    def get_observation(self) -> dict[str, Any]:
        env = self._env()
        obs: dict[str, Any] = dict(zip(so101.ACTION_NAMES, env.joint_units().tolist(), strict=True))
        for cam in env.cameras:
            obs[cam] = env.render_camera(cam)
        return obs

    def send_action(self, action: dict[str, Any]) -> dict[str, Any]:
        env = self._env()
        missing = [k for k in so101.ACTION_NAMES if k not in action]
        if missing:
            raise ValueError(f"{self}: action lacks {missing}; expected {list(so101.ACTION_NAMES)}")
        values = np.array([float(action[k]) for k in so101.ACTION_NAMES], dtype=np.float32)
        sent = np.clip(values, so101.ACTION_LOW, so101.ACTION_HIGH)
        env.step(values)
        return dict(zip(so101.ACTION_NAMES, sent.tolist(), strict=True))

    def disconnect(self) -> None:
        env = self._env()
        env.close()
        self.env = None

    def _env(self) -> SO101Env:
        if self.env is None:
            raise DeviceNotConnectedError(f"{self} is not connected")
        return self.env
