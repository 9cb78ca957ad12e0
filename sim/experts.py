"""Scripted experts for the SO-101 tasks, built on MuJoCo's own kinematics.

An expert keeps its own kinematic copy of the arm, solves damped-least-squares
inverse kinematics (Jacobians from ``mj_jac``) for a Cartesian waypoint that moves
at a bounded speed, and commands the resulting joint targets in lerobot units. The
pick-and-place expert grasps top-down with the wrist rolled to the cube's faces, so
it needs the cube pose in the state (``privileged_state``). ``noise`` adds Gaussian
noise to every command, as a share of each joint's range, for imperfect demonstrations.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import mujoco
import numpy as np
from robotrl.sim import so101
from robotrl.sim.envs import TRACK_OMEGA
from robotrl.sim.registry import task_of
from robotrl.sim.scene import CUBE_HALF, EE_SITE, SceneOptions, build_model
from robotrl.sim.so101 import Array

from robotrl.core.types import FloatArray, Observation

TRACK_LEAD_S = 0.05
"""The tracking expert aims this far ahead of the target (s): the servos lag about that much."""
SPEED_M_PER_TICK = 0.008
"""Cartesian waypoint speed (m per control tick): about 0.24 m/s at 30 Hz."""
AVOID_SPEED_M_PER_TICK = 0.005
"""The avoid expert's slower waypoint speed (0.15 m/s): the way round takes several chunks."""
AVOID_DETOUR = 0.06
"""Radius of the avoid expert's arc round the obstacle (m): 2.5 cm outside the keep-out."""
REGRASP_HEIGHT = 0.03
"""Pick-and-place: a cube less than this far above its resting height after the lift was missed (m)."""
_DOWN = np.array([0.0, 0.0, -1.0])
_PAN_AXIS_X = 0.0388  # the shoulder pan axis sits this far in front of the base origin


class ArmKinematics:
    """Forward kinematics and IK of the SO-101 (no scene objects, no randomisation)."""

    def __init__(self) -> None:
        self.model = build_model(SceneOptions())
        self.data = mujoco.MjData(self.model)
        m = self.model
        self.qadr = np.array([m.jnt_qposadr[m.joint(j).id] for j in so101.JOINTS])
        self.lo = np.array([r[0] for r in so101.JOINT_RANGES_RAD])
        self.hi = np.array([r[1] for r in so101.JOINT_RANGES_RAD])
        self.site = m.site(EE_SITE).id
        self.gripper_body = m.body("gripper").id
        self.fixed_pad = m.geom("fixed_jaw_pad").id
        self.moving_pad = m.geom("moving_jaw_pad").id
        self.grip_point_local = self._grip_point_local()

    def forward(self, q: Array) -> None:
        self.data.qpos[self.qadr] = q
        mujoco.mj_kinematics(self.model, self.data)
        mujoco.mj_comPos(self.model, self.data)

    def pad_gap(self, gripper_rad: float) -> float:
        """Distance between the pad centres at a gripper angle (arm at zero)."""
        q = np.zeros(6)
        q[5] = gripper_rad
        self.forward(q)
        return float(
            np.linalg.norm(self.data.geom_xpos[self.fixed_pad] - self.data.geom_xpos[self.moving_pad])
        )

    def gripper_for_gap(self, gap: float) -> float:
        """Gripper angle (rad) whose pad centres are ``gap`` apart (bisection: gap grows with angle)."""
        lo, hi = so101.GRIPPER_RAD
        for _ in range(40):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if self.pad_gap(mid) < gap else (lo, mid)
        return 0.5 * (lo + hi)

    def _grip_point_local(self) -> Array:
        """Between the pads when they hold a cube, in the gripper body's frame."""
        q = np.zeros(6)
        q[5] = self.gripper_for_gap(2 * CUBE_HALF + 0.01)
        self.forward(q)
        mid = 0.5 * (self.data.geom_xpos[self.fixed_pad] + self.data.geom_xpos[self.moving_pad])
        rot = self.data.xmat[self.gripper_body].reshape(3, 3)
        return np.asarray(rot.T @ (mid - self.data.xpos[self.gripper_body]))

    def point(self, grip: bool) -> Array:
        if not grip:
            tip: Array = self.data.site_xpos[self.site].copy()
            return tip
        rot = self.data.xmat[self.gripper_body].reshape(3, 3)
        return np.asarray(self.data.xpos[self.gripper_body] + rot @ self.grip_point_local)

    def closing_dir(self) -> Array:
        u = self.data.geom_xpos[self.moving_pad] - self.data.geom_xpos[self.fixed_pad]
        return np.asarray(u / (np.linalg.norm(u) + 1e-9))

    def solve(self, target: Array, q0: Array, *, grip: bool, down_weight: float, iters: int = 30) -> Array:
        """Joint angles (rad) putting the tip (or grip point) at ``target``, fingers down if weighted.

        Moves the first four joints only; wrist roll and gripper keep ``q0``'s values.
        """
        q = q0.copy()
        jacp = np.zeros((3, self.model.nv))
        jacr = np.zeros((3, self.model.nv))
        for _ in range(iters):
            self.forward(q)
            p = self.point(grip)
            err_p = target - p
            finger = self.data.site_xmat[self.site].reshape(3, 3)[:, 0]
            err_a = down_weight * (_DOWN - finger)
            if np.linalg.norm(err_p) < 5e-4 and np.linalg.norm(err_a) < 5e-3:
                break
            mujoco.mj_jac(self.model, self.data, jacp, jacr, p, self.gripper_body)
            skew = np.array(
                [[0, -finger[2], finger[1]], [finger[2], 0, -finger[0]], [-finger[1], finger[0], 0]]
            )
            ja = -skew @ jacr
            jac = np.vstack([jacp[:, self.qadr[:4]], down_weight * ja[:, self.qadr[:4]]])
            err = np.concatenate([err_p, err_a])
            dq = jac.T @ np.linalg.solve(jac @ jac.T + 1e-4 * np.eye(6), err)
            q[:4] = np.clip(q[:4] + np.clip(dq, -0.2, 0.2), self.lo[:4], self.hi[:4])
        return q


class _Expert:
    """Shared machinery: waypoint following with IK, noise, per-episode reset at tick 0."""

    down_weight = 0.0
    grip = False
    speed = SPEED_M_PER_TICK

    def __init__(self, noise: float, seed: int) -> None:
        if not 0 <= noise <= 1:
            raise ValueError(f"expert noise must be in [0, 1], got {noise}")
        self.noise = noise
        self.rng = np.random.default_rng(seed)
        self.kin = ArmKinematics()
        self.q_cmd: Array | None = None
        self.point: Array | None = None
        self.reset()

    def reset(self) -> None:
        self.q_cmd = None
        self.point = None

    def _start(self, q_obs: Array) -> None:
        self.q_cmd = q_obs.copy()
        self.kin.forward(q_obs)
        self.point = self.kin.point(self.grip)

    def _move_towards(self, goal: Array) -> float:
        """Advance the waypoint toward ``goal`` and solve IK; the distance left (m)."""
        assert self.point is not None and self.q_cmd is not None
        delta = goal - self.point
        dist = float(np.linalg.norm(delta))
        self.point = goal.copy() if dist <= self.speed else self.point + delta * (self.speed / dist)
        self.q_cmd = self.kin.solve(self.point, self.q_cmd, grip=self.grip, down_weight=self.down_weight)
        return max(0.0, dist - self.speed)

    def _command(self) -> FloatArray:
        assert self.q_cmd is not None
        action = so101.rad_to_units(self.q_cmd)
        if self.noise > 0:
            span = so101.ACTION_HIGH - so101.ACTION_LOW
            action = action + self.rng.normal(0.0, self.noise, 6).astype(np.float32) * span
        return np.clip(action, so101.ACTION_LOW, so101.ACTION_HIGH).astype(np.float32)


def _state_of(obs: Observation | Array) -> Array:
    return np.asarray(obs.state if isinstance(obs, Observation) else obs, dtype=np.float64)


def _tick_of(obs: Observation | Array, fallback: int) -> int:
    return obs.tick if isinstance(obs, Observation) else fallback


class ReachExpert(_Expert):
    """Moves the fingertip straight to the target."""

    def act(self, obs: Observation | Array) -> FloatArray:
        state = _state_of(obs)
        if self.q_cmd is None or _tick_of(obs, 1) == 0:
            self._start(so101.units_to_rad(state[:6]))
        self._move_towards(state[12:15])
        return self._command()


class AvoidExpert(_Expert):
    """Reaches the target around the obstacle, on a side drawn at random each episode (50/50):
    straight at the obstacle, half way round it on an arc of radius AVOID_DETOUR, then to the
    target. Its demonstrations are bimodal, and nothing in the state says which side until the
    arm turns, which is where consecutive chunks of a learned policy can disagree."""

    speed = AVOID_SPEED_M_PER_TICK

    def reset(self) -> None:
        super().reset()
        self.waypoints: list[Array] = []
        self.side = 0.0  # +1 left of the way, -1 right; drawn at the episode's first tick

    def act(self, obs: Observation | Array) -> FloatArray:
        state = _state_of(obs)
        if state.shape[0] < 18:
            raise ValueError("the avoid expert needs the obstacle's position in the state (SO101Avoid-v0)")
        if self.q_cmd is None or _tick_of(obs, 1) == 0:
            self._start(so101.units_to_rad(state[:6]))
            assert self.point is not None
            self.side = float(self.rng.choice([-1.0, 1.0]))
            self.waypoints = detour(self.point, state[12:15], state[15:18], self.side)
        if self._move_towards(self.waypoints[0]) == 0.0 and len(self.waypoints) > 1:
            self.waypoints.pop(0)
        return self._command()


def detour(start: Array, goal: Array, obstacle: Array, side: float) -> list[Array]:
    """Waypoints from ``start`` to ``goal`` around ``obstacle``: a half circle of radius
    AVOID_DETOUR about it in the horizontal direction ``side`` (+1 left of the way, -1 right)."""
    way = goal - start
    u = way / np.linalg.norm(way)
    n = np.cross([0.0, 0.0, 1.0], u)
    n = side * n / np.linalg.norm(n)
    angles = np.linspace(math.pi, 0.0, 9)
    arc = [obstacle + AVOID_DETOUR * (math.cos(a) * u + math.sin(a) * n) for a in angles]
    return [*arc, goal.copy()]


class TrackExpert(_Expert):
    """Keeps the fingertip on the moving target, aiming where the target will be ``lead_s``
    seconds on (its circle follows from its position and velocity), which hides the servos' lag."""

    def __init__(self, noise: float, seed: int, lead_s: float = TRACK_LEAD_S) -> None:
        super().__init__(noise, seed)
        self.lead_s = lead_s

    def act(self, obs: Observation | Array) -> FloatArray:
        state = _state_of(obs)
        if state.shape[0] < 18:
            raise ValueError("the tracking expert needs the target's velocity in the state (SO101Track-v0)")
        if self.q_cmd is None or _tick_of(obs, 1) == 0:
            self._start(so101.units_to_rad(state[:6]))
        self._move_towards(predict_target(state[12:15], state[15:18], self.lead_s))
        return self._command()


def predict_target(pos: Array, vel: Array, ahead_s: float) -> Array:
    """Where the tracked target will be ``ahead_s`` seconds on: its counter-clockwise circle at
    TRACK_OMEGA has its centre at ``pos - (vy, -vx, 0) / omega``."""
    offset = np.array([vel[1], -vel[0], 0.0]) / TRACK_OMEGA
    centre = pos - offset
    turn = TRACK_OMEGA * ahead_s
    c, s = math.cos(turn), math.sin(turn)
    rotated = np.array([c * offset[0] - s * offset[1], s * offset[0] + c * offset[1], 0.0])
    return np.asarray(centre + rotated)


class PickPlaceExpert(_Expert):
    """Top-down grasp of the cube, carry above the zone, lower, release, retreat.

    A grasp that missed (the cube is still on the table when the lift ends) is tried again
    from the approach, with the jaws open and the wrist rolled to the cube's pose then: with
    executed noise (``record.dart_noise``) or a deliberate miss (``aim_offset``, executed
    only: ``record.miss_rate``) the demonstrations show how to recover from a miss.
    """

    down_weight = 0.3
    grip = True
    HOVER = 0.07
    PHASES: Sequence[str] = ("approach", "descend", "close", "lift", "carry", "lower", "release", "retreat")

    def __init__(self, noise: float, seed: int) -> None:
        super().__init__(noise, seed)
        self.open_rad = self.kin.gripper_for_gap(2 * CUBE_HALF + 0.035)
        self.closed_rad = so101.GRIPPER_RAD[0]
        self.aim_offset = np.zeros(3)
        """Added to the cube's position until the first grasp (m): a deliberate miss. Kept across
        episodes; whoever sets it chooses it per episode."""

    def reset(self, phase: str = "approach") -> None:
        """Forget the episode: the next ``act`` starts from the arm's pose with the jaws open, at
        ``phase`` (``descend``: straight down onto the cube, correcting a grasp taken too high)."""
        super().reset()
        self.phase = self.PHASES.index(phase)
        self.phase_ticks = 0
        self.regrasps = 0

    @property
    def first_grasp_pending(self) -> bool:
        """The first attempt has not closed its jaws yet (a deliberate miss can still be made)."""
        return self.regrasps == 0 and self.phase <= self.PHASES.index("close")

    def act(self, obs: Observation | Array) -> FloatArray:
        state = _state_of(obs)
        if state.shape[0] < 22:
            raise ValueError(
                "the pick-and-place expert needs the cube pose in the state: build the env with "
                "privileged_state=True"
            )
        if _tick_of(obs, 1) == 0:
            self.reset()
        if self.q_cmd is None:
            self._start(so101.units_to_rad(state[:6]))
            self.q_cmd[5] = self.open_rad  # type: ignore[index]
            self._roll_to(state[15:22])
        cube, zone = state[15:18] + (self.aim_offset if self.regrasps == 0 else 0.0), state[12:15]
        name = self.PHASES[min(self.phase, len(self.PHASES) - 1)]
        if name == "carry" and self.phase_ticks == 0 and cube[2] < CUBE_HALF + REGRASP_HEIGHT:
            self.phase, name = 0, "approach"  # the lift left the cube behind: grasp again
            self.q_cmd[5] = self.open_rad  # type: ignore[index]
            self._roll_to(state[15:22])
            self.regrasps += 1
        hover_cube = np.array([cube[0], cube[1], CUBE_HALF + self.HOVER])
        hover_zone = np.array([zone[0], zone[1], CUBE_HALF + self.HOVER])
        done = False
        if name == "approach":
            done = self._move_towards(hover_cube) == 0.0
        elif name == "descend":
            done = self._move_towards(np.array([cube[0], cube[1], CUBE_HALF])) == 0.0
        elif name == "close":
            self.q_cmd[5] = self.closed_rad  # type: ignore[index]
            done = self.phase_ticks >= 10
        elif name == "lift":
            done = self._move_towards(np.array([*self.point[:2], CUBE_HALF + self.HOVER])) == 0.0  # type: ignore[index]
        elif name == "carry":
            done = self._move_towards(hover_zone) == 0.0
        elif name == "lower":
            done = self._move_towards(np.array([zone[0], zone[1], CUBE_HALF + 0.004])) == 0.0
        elif name == "release":
            self.q_cmd[5] = self.open_rad  # type: ignore[index]
            done = self.phase_ticks >= 8
        else:
            self._move_towards(hover_zone)
        self.phase_ticks += 1
        if done:
            self.phase, self.phase_ticks = self.phase + 1, 0
        return self._command()

    def _roll_to(self, cube_pose: Array) -> None:
        """Choose the wrist roll that closes the jaws across two opposite cube faces."""
        assert self.q_cmd is not None
        w, z = cube_pose[3], cube_pose[6]
        yaw = 2.0 * math.atan2(z, w)
        axes = [np.array([math.cos(yaw), math.sin(yaw), 0.0]), np.array([-math.sin(yaw), math.cos(yaw), 0.0])]
        target = np.array([cube_pose[0], cube_pose[1], CUBE_HALF + self.HOVER])
        best, best_score = self.q_cmd[4], -1.0
        pan = math.atan2(cube_pose[1], cube_pose[0] - _PAN_AXIS_X)
        rel = (yaw - pan + math.pi / 4) % (math.pi / 2) - math.pi / 4
        for roll in (rel, -rel):
            q = self.q_cmd.copy()
            q[4] = roll
            q = self.kin.solve(target, q, grip=True, down_weight=self.down_weight)
            u = self.kin.closing_dir()
            score = max(abs(float(u @ a)) for a in axes)
            if score > best_score:
                best, best_score = roll, score
        self.q_cmd[4] = best


def make_expert(env_id: str, noise: float = 0.0, seed: int = 0) -> _Expert:
    """The scripted expert of ``env_id``: ``act(obs) -> action`` in lerobot units."""
    experts = {
        "reach": ReachExpert,
        "track": TrackExpert,
        "avoid": AvoidExpert,
        "pick_place": PickPlaceExpert,
    }
    return experts[task_of(env_id)](noise, seed)
