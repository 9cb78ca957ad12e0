"""A scripted stand-in for the human who takes over a struggling robot (HIL-SERL's interventions).

On a real arm a person holding a leader arm or gamepad takes over when the policy is
going wrong; the actor then records what the person did, flagged as an intervention,
and the learner keeps those segments in its anchor buffer. No person can sit at the sim,
so :class:`ExpertTakeover` plays one, in any of three ways:

- **late** (``after_ticks``): once an episode has run that many ticks without success,
  the task's scripted expert drives the arm, from wherever the policy left it, to the
  episode's end;
- **on a miss** (``on_miss``, pick-and-place): the moment the policy's jaws have closed on
  nothing while the cube is still on the table (a grasp that missed), or once they have
  stayed so ``miss_wait_ticks`` ticks, the expert takes over, grasps the cube again and
  hands back once it has lifted it, as a person correcting the grasp would;
- **before a miss** (``before_miss``, pick-and-place): the moment the policy's jaws start
  to close off the cube (the grip point more than ``OFF_CUBE_Z`` above its centre, or
  ``OFF_CUBE_XY`` to one side), before the cube is lifted: the expert opens the jaws,
  descends onto the cube (straight down when it is below them, else from above it), grasps
  and hands back once it has lifted it. Over 40 evaluation episodes of the 50-demo
  pretrained policy, most failed grasps closed 1.3-1.9 cm too high (taking the cube's top
  edge) and every successful one within 0.6 cm of its centre height.

A grasp is corrected at most ``max_corrections`` times per episode (by default once), by
whichever trigger fires first. With ``reopen_only`` the expert hands back sooner, once its
jaws are open again above the cube (hovering over it after a miss, or as it starts to descend
before one), as a person who only pulls the gripper off a bad grasp would: the policy then
grasps again by itself, so the fine-tuning data holds its own second tries (and their
outcomes) rather than the expert's.

It reports exactly what the real arm reports during an intervention: the action that
ran (``info["executed"]``) and ``info["intervention"]``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from robotrl.sim import so101
from robotrl.sim.envs import CUBE_LIFTED
from robotrl.sim.experts import PickPlaceExpert, make_expert

from robotrl.core.protocols import RobotEnv, StepResult
from robotrl.core.types import EnvSpec, FloatArray, Observation

CUBE_POSITION = ("cube.x", "cube.y", "cube.z")
GRIPPER = "gripper.pos"
JAWS_SHUT = 8.0
"""Gripper position (0-100, 0 closed) below which the jaws hold nothing: closed on the 2.5 cm
cube they stop near 16, closed on air near 0."""
JAWS_OPEN = 35.0
"""Gripper position above which the jaws are open for a grasp (the expert opens them to 40)."""
JAWS_CLOSING = 30.0
"""Gripper position below which jaws that were open are closing on whatever is between them."""
OFF_CUBE_Z = 0.01
"""Grip point height above the cube's centre (m) beyond which closing jaws take only its top edge."""
OFF_CUBE_XY = 0.02
"""Grip point distance from the cube's centre across the table (m) beyond which closing jaws miss it."""
ALIGNED_XY = 0.01
"""Within this distance across the table (m) the expert corrects a grasp by descending straight down."""


class ExpertTakeover:
    """Wraps a sim :class:`RobotEnv`; the expert of ``env_id`` drives when a takeover is due."""

    def __init__(
        self,
        env: RobotEnv,
        env_id: str,
        after_ticks: int = 0,
        on_miss: bool = False,
        before_miss: bool = False,
        miss_wait_ticks: int = 0,
        reopen_only: bool = False,
        max_corrections: int = 1,
    ) -> None:
        if after_ticks < 0 or miss_wait_ticks < 0 or max_corrections < 1:
            raise ValueError(
                "after_ticks and miss_wait_ticks must be >= 0 and max_corrections >= 1, got "
                f"{after_ticks}, {miss_wait_ticks}, {max_corrections}"
            )
        names = env.spec.state_names
        grasps = on_miss or before_miss
        if grasps and not {*CUBE_POSITION, GRIPPER} <= set(names):
            raise ValueError("a takeover on a missed grasp needs the cube's position in the state")
        self.env, self.after_ticks, self.on_miss, self.before_miss = env, after_ticks, on_miss, before_miss
        self.miss_wait_ticks, self.reopen_only = miss_wait_ticks, reopen_only
        self.max_corrections = max_corrections
        if reopen_only and not grasps:
            raise ValueError("reopen_only needs a takeover on a missed grasp (on_miss or before_miss)")
        self._shut_ticks = 0  # consecutive ticks the policy's jaws have been shut on nothing
        self._cube = [names.index(n) for n in CUBE_POSITION] if grasps else []
        self._gripper = names.index(GRIPPER) if grasps else -1
        self.expert = make_expert(env_id)
        if before_miss and not isinstance(self.expert, PickPlaceExpert):
            raise ValueError(f"a takeover before a missed grasp exists only in pick-and-place, not {env_id}")
        self._obs: Observation | None = None
        self._driving = False  # the expert has the arm
        self._until_end = False  # ... to the episode's end (late), or until it lifts the cube (miss)
        self._corrections = 0  # grasps the expert corrected this episode
        self._opened = False  # the policy's jaws have opened for a grasp
        self._lifted = False  # the cube has been lifted this episode

    @property
    def spec(self) -> EnvSpec:
        return self.env.spec

    def reset(self, seed: int | None = None) -> Observation:
        self._obs = self.env.reset(seed)
        self._driving = self._until_end = self._opened = self._lifted = False
        self._shut_ticks = self._corrections = 0
        return self._obs

    def step(self, action: FloatArray) -> StepResult:
        obs = self._obs
        if obs is None:
            raise RuntimeError("step() before reset()")
        self._update(obs)
        if self._driving:
            action = self.expert.act(obs)
        step = self.env.step(action)
        if self._driving:
            step = replace(step, info={**step.info, "executed": action, "intervention": True})
        self._obs = step.observation
        return step

    def _update(self, obs: Observation) -> None:
        """Take over, or hand back, before the step from ``obs``."""
        if self._driving and not self._until_end and self._grasp_corrected(obs):
            self._driving = False  # the policy carries on
        if self._until_end:
            return
        if self.after_ticks and obs.tick >= self.after_ticks:
            self._take_over(until_end=True)
            return
        if self._driving or self._corrections >= self.max_corrections:
            return
        if self.on_miss and self._missed_grasp(obs):
            self._corrections += 1
            self._take_over(until_end=False)
        elif self.before_miss and self._closing_off_the_cube(obs):
            self._corrections += 1
            self._take_over(until_end=False, descend=self._above_cube(obs))

    def _take_over(self, until_end: bool, descend: bool = False) -> None:
        if not self._driving:
            # It starts from the arm's pose and the objects as they are now.
            if isinstance(self.expert, PickPlaceExpert):
                self.expert.reset("descend" if descend else "approach")
            else:
                self.expert.reset()
        self._driving, self._until_end = True, until_end

    def _grasp_corrected(self, obs: Observation) -> bool:
        """The expert got as far as it should: the cube lifted, or with ``reopen_only`` the jaws
        open above it."""
        return self._expert_reopened(obs) if self.reopen_only else self._expert_lifted(obs)

    def _expert_reopened(self, obs: Observation) -> bool:
        """The expert's approach is over (it hovers above the cube, or starts its descent onto
        it) and its jaws are open."""
        assert isinstance(self.expert, PickPlaceExpert)
        above = self.expert.phase >= self.expert.PHASES.index("descend")
        return above and float(obs.state[self._gripper]) > JAWS_OPEN

    def _expert_lifted(self, obs: Observation) -> bool:
        """The expert finished its lift with the cube up (else it grasps again itself)."""
        phases = getattr(self.expert, "PHASES", ())
        phase = getattr(self.expert, "phase", 0)
        cube = self._cube_position(obs)
        lifted = "carry" in phases and phase >= phases.index("carry")
        return lifted and cube is not None and bool(cube[2] > CUBE_LIFTED)

    def _cube_position(self, obs: Observation) -> FloatArray | None:
        return np.asarray(obs.state)[self._cube] if self._cube else None

    def _closing_off_the_cube(self, obs: Observation) -> bool:
        """The policy's jaws, opened for a grasp, are closing with the grip point off the cube,
        which has not been lifted yet this episode."""
        gripper = float(obs.state[self._gripper])
        cube = self._cube_position(obs)
        assert cube is not None
        self._lifted |= bool(cube[2] > CUBE_LIFTED)
        self._opened |= gripper > JAWS_OPEN
        if self._lifted or not self._opened or gripper >= JAWS_CLOSING:
            return False
        off = self._grip_point(obs) - cube
        return bool(off[2] > OFF_CUBE_Z or np.hypot(off[0], off[1]) > OFF_CUBE_XY)

    def _above_cube(self, obs: Observation) -> bool:
        cube = self._cube_position(obs)
        assert cube is not None
        off = self._grip_point(obs) - cube
        return bool(np.hypot(off[0], off[1]) <= ALIGNED_XY)

    def _grip_point(self, obs: Observation) -> FloatArray:
        """Between the pads where they hold a cube (forward kinematics of the measured joints)."""
        assert isinstance(self.expert, PickPlaceExpert)
        kin = self.expert.kin
        kin.forward(so101.units_to_rad(np.asarray(obs.state[:6])))
        point: FloatArray = kin.point(grip=True)
        return point

    def _missed_grasp(self, obs: Observation) -> bool:
        """The jaws are shut on nothing with the cube on the table, and have been for more than
        ``miss_wait_ticks`` ticks (the policy did not try again by itself)."""
        cube = self._cube_position(obs)
        assert cube is not None
        shut = obs.state[self._gripper] < JAWS_SHUT and cube[2] < CUBE_LIFTED
        self._shut_ticks = self._shut_ticks + 1 if shut else 0
        return self._shut_ticks > self.miss_wait_ticks

    def close(self) -> None:
        self.env.close()
