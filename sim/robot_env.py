"""The gymnasium SO-101 env behind robotrl's :class:`~robotrl.core.protocols.RobotEnv` protocol."""

from __future__ import annotations

import numpy as np
from robotrl.sim import so101
from robotrl.sim.envs import SO101Env
from robotrl.sim.so101 import Array

from robotrl.core.protocols import StepResult
from robotrl.core.types import EnvSpec, FloatArray, Observation


class SimRobotEnv:
    """Adapts :class:`SO101Env` to :class:`RobotEnv`: ticks, Observations, StepResults."""

    def __init__(self, env: SO101Env, name: str, seed_offset: int = 0) -> None:
        self.env = env
        self.seed_offset = seed_offset
        self._tick = 0
        self._spec = EnvSpec(
            name=name,
            action_names=so101.ACTION_NAMES,
            action_low=tuple(float(v) for v in so101.ACTION_LOW),
            action_high=tuple(float(v) for v in so101.ACTION_HIGH),
            state_names=env.state_names,
            camera_shapes={c: (env.image_size, env.image_size, 3) for c in env.cameras},
            control_hz=env.control_hz,
            max_episode_ticks=env.max_episode_ticks,
            instruction=env.task.instruction,
        )

    @property
    def spec(self) -> EnvSpec:
        return self._spec

    def reset(self, seed: int | None = None) -> Observation:
        obs, _ = self.env.reset(seed=None if seed is None else seed + self.seed_offset)
        self._tick = 0
        return self._observation(obs)

    def step(self, action: FloatArray) -> StepResult:
        obs, reward, terminated, truncated, info = self.env.step(np.asarray(action))
        self._tick += 1
        return StepResult(self._observation(obs), reward, terminated, truncated, info)

    def close(self) -> None:
        self.env.close()

    def _observation(self, obs: dict[str, Array]) -> Observation:
        images = {c: obs[c] for c in self.env.cameras}
        return Observation(
            tick=self._tick,
            state=obs["state"],
            images=images,
            instruction=self.env.task.instruction,
            timestamp=float(self.env.data.time),
        )
