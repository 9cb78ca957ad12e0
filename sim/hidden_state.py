"""The policy's view of a sim that knows more than the policy may: state columns hidden.

A person correcting a real arm sees the cube; the arm's policy sees only its cameras and joints.
The sim's stand-in for that person (:class:`~robotrl.sim.intervention.ExpertTakeover`) reads the
cube pose from the state, so a pick-and-place run with takeovers and ``env.privileged_state=false``
steps a privileged sim under the takeover and hides the cube's columns above it, as recording
does for the dataset (sim/record.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from robotrl.core.protocols import RobotEnv, StepResult
from robotrl.core.types import EnvSpec, FloatArray, Observation


class HiddenState:
    """Wraps a :class:`RobotEnv`; its observations and spec lack the state columns ``hidden``
    names. Everything else (images, rewards, info, the wrapped env's takeovers) passes through."""

    def __init__(self, env: RobotEnv, hidden: Callable[[str], bool]) -> None:
        names = env.spec.state_names
        self.env = env
        self._keep = np.array([i for i, n in enumerate(names) if not hidden(n)], np.int64)
        self._spec = replace(env.spec, state_names=tuple(names[i] for i in self._keep))

    @property
    def spec(self) -> EnvSpec:
        return self._spec

    def reset(self, seed: int | None = None) -> Observation:
        return self._strip(self.env.reset(seed))

    def step(self, action: FloatArray) -> StepResult:
        step = self.env.step(action)
        return replace(step, observation=self._strip(step.observation))

    def close(self) -> None:
        self.env.close()

    def _strip(self, obs: Observation) -> Observation:
        return replace(obs, state=np.asarray(obs.state)[self._keep])
