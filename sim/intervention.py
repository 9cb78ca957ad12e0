"""A scripted stand-in for the human who takes over a struggling robot (HIL-SERL's interventions).

On a real arm a person holding a leader arm or gamepad takes over when the policy is
going wrong; the actor then records what the person did, flagged as an intervention,
and the learner keeps those segments in its anchor buffer. No person can sit at the sim,
so :class:`ExpertTakeover` plays one: once an episode has run ``after_ticks`` ticks
without success, the task's scripted expert drives the arm, from wherever the policy
left it, to the end of the episode. It reports exactly what the real arm reports during
an intervention: the action that ran (``info["executed"]``) and ``info["intervention"]``.
"""

from __future__ import annotations

from dataclasses import replace

from robotrl.sim.experts import make_expert

from robotrl.core.protocols import RobotEnv, StepResult
from robotrl.core.types import EnvSpec, FloatArray, Observation


class ExpertTakeover:
    """Wraps a sim :class:`RobotEnv`; the expert of ``env_id`` drives from tick ``after_ticks`` on."""

    def __init__(self, env: RobotEnv, env_id: str, after_ticks: int) -> None:
        if after_ticks <= 0:
            raise ValueError(f"after_ticks must be > 0, got {after_ticks}")
        self.env, self.after_ticks = env, after_ticks
        self.expert = make_expert(env_id)
        self._obs: Observation | None = None
        self._taken_over = False

    @property
    def spec(self) -> EnvSpec:
        return self.env.spec

    def reset(self, seed: int | None = None) -> Observation:
        self._obs = self.env.reset(seed)
        self._taken_over = False
        return self._obs

    def step(self, action: FloatArray) -> StepResult:
        if self._obs is None:
            raise RuntimeError("step() before reset()")
        if not self._taken_over and self._obs.tick >= self.after_ticks:
            self.expert.reset()  # it starts from the arm's pose and the objects as they are now
            self._taken_over = True
        if self._taken_over:
            action = self.expert.act(self._obs)
        step = self.env.step(action)
        if self._taken_over:
            step = replace(step, info={**step.info, "executed": action, "intervention": True})
        self._obs = step.observation
        return step

    def close(self) -> None:
        self.env.close()
