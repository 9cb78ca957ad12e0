"""Gymnasium environments of the SO-101 tasks: reach a target; track a moving target; reach a
target around an obstacle (either side); pick a cube and place it.

Actions are absolute joint targets in lerobot's ``so101_follower`` units (see
:mod:`robotrl.sim.so101`), held by the servos' position controllers for the several
physics substeps of one control tick. The observation is a dict: ``"state"`` (joint
positions in action units, joint velocities in units/s, the goal position, then the
cube pose when privileged) and one uint8 RGB image per camera. The tracking task adds the
target's velocity after its position, the avoid task the obstacle's position.

Domain randomisation draws everything from the reset seed: object and goal poses,
cube friction and mass, colours, light, camera pose, and joint calibration offsets
(observed and commanded joint values are off by a few tenths of a degree, as on a
real arm). Same seed, same episode.

The ``scene`` (:class:`~robotrl.config.scene.SceneConfig`, ``env.scene``) sets the physical
condition of the pick-and-place task: the ranges the cube's placement is drawn from and scales
on its mass and friction, so demonstrations can come from one condition and deployment happen
in another. The other tasks have no cube and ignore it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
from robotrl.sim import so101
from robotrl.sim.render import make_renderer
from robotrl.sim.scene import (
    CUBE_HALF,
    EE_SITE,
    OBSTACLE_RADIUS,
    ZONE_RADIUS,
    SceneOptions,
    build_model,
    substeps_for,
)
from robotrl.sim.so101 import Array

from robotrl.config.bounds import bound_problems
from robotrl.config.scene import SceneConfig
from robotrl.core.types import OUTCOME_INFO_KEY, OUTCOME_SUCCESS, FloatArray

REST_POSE_UNITS = np.array([0.0, -90.0, 85.0, 60.0, 0.0, 20.0], dtype=np.float32)
"""Start pose (lerobot units): arm folded above the base, gripper slightly open."""
REACH_TOLERANCE = 0.02
"""Reach succeeds when the fingertip frame is this close to the target (m)."""
TRACK_TOLERANCE = 0.04
"""Tracking counts a tick as on target when the fingertip is this close to the moving target (m)."""
TRACK_HOLD_TICKS = 60
"""Tracking succeeds after this many consecutive ticks on target (2 s at 30 Hz)."""
TRACK_OMEGA = 2.4
"""Angular speed of the tracked target on its circle (rad/s, counter-clockwise seen from above):
the same in every episode, so the target's position and velocity determine its whole path."""
OBSTACLE_KEEP_OUT = OBSTACLE_RADIUS + 0.01
"""Avoid task: the fingertip closer than this to the obstacle's centre touches it (m), which ends
the episode as a failure."""
CUBE_MOVED = 0.01
"""Pick-and-place: the cube counts as disturbed once it is this far (m) from where it started."""
CUBE_LIFTED = 3 * CUBE_HALF
"""Pick-and-place: the cube counts as lifted once its centre is this high (m): one cube above rest."""

OUTCOME_TIMEOUT = "timeout"
OUTCOME_OBSTACLE = "touched the obstacle"
OUTCOME_CUBE_UNTOUCHED = "cube never moved"
OUTCOME_CUBE_NOT_LIFTED = "cube pushed, never lifted"
OUTCOME_CUBE_DROPPED = "cube lifted, left outside the zone"
OUTCOME_CUBE_HELD = "cube still held"
"""How a failed episode ended (``info[OUTCOME_INFO_KEY]`` on its last step): what `robotrl eval`
counts, so a success rate comes with what the failures were (a grasp that never closed, a drop)."""


def pick_place_outcome(success: bool, moved: bool, lifted: bool, held: bool) -> str:
    """The outcome of a pick-and-place episode from what happened to the cube."""
    if success:
        return OUTCOME_SUCCESS
    if held:
        return OUTCOME_CUBE_HELD
    if lifted:
        return OUTCOME_CUBE_DROPPED
    return OUTCOME_CUBE_NOT_LIFTED if moved else OUTCOME_CUBE_UNTOUCHED


@dataclass(frozen=True)
class TaskInfo:
    name: str
    instruction: str
    with_cube: bool
    moving: bool = False
    obstacle: bool = False


TASKS = {
    "reach": TaskInfo("reach", "move the gripper tip to the red ball", with_cube=False),
    "track": TaskInfo("track", "keep the gripper tip on the moving red ball", with_cube=False, moving=True),
    "avoid": TaskInfo(
        "avoid",
        "move the gripper tip to the red ball without touching the blue ball",
        with_cube=False,
        obstacle=True,
    ),
    "pick_place": TaskInfo(
        "pick_place", "pick up the red cube and place it on the green disc", with_cube=True
    ),
}


class SO101Env(gym.Env[dict[str, Array], Array]):
    """One SO-101 task in MuJoCo, stepped at ``control_hz``."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}  # noqa: RUF012 (gymnasium's API)

    def __init__(
        self,
        task: str = "reach",
        control_hz: float = 30.0,
        max_episode_ticks: int = 300,
        cameras: tuple[str, ...] | list[str] = (),
        image_size: int = 96,
        privileged_state: bool = False,
        tip_position: bool = False,
        domain_randomization: bool = True,
        dense_reward: bool = False,
        render_mode: str | None = None,
        scene: SceneConfig | None = None,
    ) -> None:
        if task not in TASKS:
            raise ValueError(f"unknown SO-101 task {task!r}; known: {sorted(TASKS)}")
        unknown = set(cameras) - {"front", "wrist"}
        if unknown:
            raise ValueError(f"unknown cameras {sorted(unknown)}; the SO-101 scene has 'front' and 'wrist'")
        if control_hz <= 0 or max_episode_ticks <= 0 or image_size < 16:
            raise ValueError("control_hz and max_episode_ticks must be > 0, image_size >= 16")
        self.scene = scene or SceneConfig()
        wrong = bound_problems(self.scene)
        if wrong:
            raise ValueError("; ".join(f"env.scene.{name}: {msg}" for name, msg in wrong))
        self.task = TASKS[task]
        self.control_hz = float(control_hz)
        self.max_episode_ticks = int(max_episode_ticks)
        self.cameras = tuple(cameras)
        self.image_size = int(image_size)
        self.privileged_state = privileged_state
        self.tip_position = tip_position
        self.domain_randomization = domain_randomization
        self.dense_reward = dense_reward
        self.render_mode = render_mode
        self.metadata = {**self.metadata, "render_fps": self.control_hz}

        self.model = build_model(
            SceneOptions(control_hz, image_size, self.task.with_cube, self.task.obstacle)
        )
        self.data = mujoco.MjData(self.model)
        self.substeps, _ = substeps_for(control_hz)
        self._index_model()
        self._offsets: Array = np.zeros(6)
        self._low, self._high = so101.ACTION_LOW.copy(), so101.ACTION_HIGH.copy()
        self.action_space = gym.spaces.Box(self._low, self._high, dtype=np.float32)
        self.state_names = self._state_names()
        spaces: dict[str, gym.Space[Any]] = {
            "state": gym.spaces.Box(-np.inf, np.inf, (len(self.state_names),), dtype=np.float32)
        }
        for cam in self.cameras:
            spaces[cam] = gym.spaces.Box(0, 255, (image_size, image_size, 3), dtype=np.uint8)
        self.observation_space = gym.spaces.Dict(spaces)  # type: ignore[assignment]
        self._renderer: mujoco.Renderer | None = None
        self._tick = 0
        self._track = (np.zeros(3), 0.0, 0.0)  # tracking: circle centre, radius, start angle
        self._on_target = 0  # tracking: consecutive ticks on target
        self._touched = False  # avoid: the tip touched the obstacle
        self._cube_start: Array | None = None  # pick-and-place: where the cube started, and what
        self._cube_moved = self._cube_lifted = False  # has happened to it since (the outcome)
        self.clipped_actions = 0
        """Actions (ticks) clipped to the joint ranges this episode."""

    # ---- layout -------------------------------------------------------------------------------
    def _index_model(self) -> None:
        """The MuJoCo ids and addresses a step reads, and the nominal values domain randomisation
        perturbs, looked up once."""
        m = self.model
        self._qadr = np.array([m.jnt_qposadr[m.joint(j).id] for j in so101.JOINTS])
        self._vadr = np.array([m.jnt_dofadr[m.joint(j).id] for j in so101.JOINTS])
        self._ee = m.site(EE_SITE).id
        self._goal_body = m.body("goal").id
        self._goal_geom = m.geom("goal").id
        self._obstacle_body = m.body("obstacle").id if self.task.obstacle else -1
        self._cube_q = m.jnt_qposadr[m.joint("cube").id] if self.task.with_cube else -1
        self._cube_body = m.body("cube").id if self.task.with_cube else -1
        self._cube_geom = m.geom("cube").id if self.task.with_cube else -1
        self._pads = {m.geom("fixed_jaw_pad").id, m.geom("moving_jaw_pad").id}
        self._nominal = {
            "geom_friction": m.geom_friction.copy(),
            "geom_rgba": m.geom_rgba.copy(),
            "body_mass": m.body_mass.copy(),
            "body_inertia": m.body_inertia.copy(),
            "light_diffuse": m.light_diffuse.copy(),
            "light_pos": m.light_pos.copy(),
            "cam_pos": m.cam_pos.copy(),
            "cam_fovy": m.cam_fovy.copy(),
        }

    def _state_names(self) -> tuple[str, ...]:
        names = [f"{j}.pos" for j in so101.JOINTS] + [f"{j}.vel" for j in so101.JOINTS]
        names += ["goal.x", "goal.y", "goal.z"]
        if self.task.moving:
            names += ["goal.vx", "goal.vy", "goal.vz"]
        if self.task.obstacle:
            names += ["obstacle.x", "obstacle.y", "obstacle.z"]
        if self.privileged_state and self.task.with_cube:
            names += ["cube.x", "cube.y", "cube.z", "cube.qw", "cube.qx", "cube.qy", "cube.qz"]
        if self.tip_position:
            names += ["tip.x", "tip.y", "tip.z"]
        return tuple(names)

    # ---- gymnasium API ------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Array], dict[str, Any]]:
        super().reset(seed=seed)
        rng = self.np_random
        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)
        for key, value in self._nominal.items():
            getattr(m, key)[:] = value
        self._randomize(rng)
        self._apply_scene()
        q0 = so101.units_to_rad(REST_POSE_UNITS) + rng.uniform(-0.03, 0.03, 6) * np.array([1, 1, 1, 1, 1, 0])
        if self.task.obstacle:  # start turned to one side; the target is on the other
            q0[0] = rng.choice([-1.0, 1.0]) * rng.uniform(0.6, 0.8)
        d.qpos[self._qadr] = q0
        d.ctrl[:] = q0
        self._place_task_objects(rng)
        mujoco.mj_forward(m, d)
        self._tick = 0
        self._on_target = 0
        self._touched = False
        self._cube_start = self.cube_pose[:3] if self.task.with_cube else None
        self._cube_moved = self._cube_lifted = False
        self.clipped_actions = 0
        return self._observe(), self._info(False)

    def step(self, action: Array) -> tuple[dict[str, Array], float, bool, bool, dict[str, Any]]:
        a = np.asarray(action, dtype=np.float64)
        if a.shape != (6,):
            raise ValueError(f"SO-101 action must have shape (6,) (5 joints then gripper), got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"SO-101 action must be finite, got {a.tolist()}")
        clipped = np.clip(a, self._low, self._high)
        if not np.array_equal(clipped, a):
            self.clipped_actions += 1
        self.data.ctrl[:] = so101.units_to_rad(clipped) - self._offsets
        mujoco.mj_step(self.model, self.data, nstep=self.substeps)
        self._tick += 1
        if self.task.moving:
            self._move_target()
        if self.task.obstacle and not self._touched:
            self._touched = bool(np.linalg.norm(self.ee_pos - self.obstacle_pos) < OBSTACLE_KEEP_OUT)
        if self._cube_start is not None:
            cube = self.cube_pose[:3]
            self._cube_moved |= bool(np.linalg.norm(cube - self._cube_start) > CUBE_MOVED)
            self._cube_lifted |= bool(cube[2] > CUBE_LIFTED)
        success = self._success()
        reward = float(success) + (self._shaping() if self.dense_reward else 0.0)
        terminated = success or self._touched  # touching the obstacle ends the episode, failed
        truncated = self._tick >= self.max_episode_ticks and not terminated
        info = self._info(success)
        if terminated or truncated:
            info[OUTCOME_INFO_KEY] = self._outcome(success)
        return self._observe(), reward, terminated, truncated, info

    def render(self) -> Array | None:
        if self.render_mode != "rgb_array":
            return None
        return self.render_camera(self.cameras[0] if self.cameras else "front")

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    # ---- task ---------------------------------------------------------------------------------
    @property
    def ee_pos(self) -> Array:
        pos: Array = self.data.site_xpos[self._ee].copy()
        return pos

    @property
    def goal_pos(self) -> Array:
        pos: Array = self.model.body_pos[self._goal_body].copy()
        return pos

    @property
    def obstacle_pos(self) -> Array:
        """The avoid task's obstacle centre; empty for other tasks."""
        if self._obstacle_body < 0:
            return np.zeros(0)
        pos: Array = self.model.body_pos[self._obstacle_body].copy()
        return pos

    @property
    def cube_pose(self) -> Array:
        """Cube position and quaternion (w, x, y, z); empty for tasks without a cube."""
        if self._cube_q < 0:
            return np.zeros(0)
        pose: Array = self.data.qpos[self._cube_q : self._cube_q + 7].copy()
        return pose

    @property
    def goal_vel(self) -> Array:
        """The target's velocity (m/s); zero unless it moves."""
        if not self.task.moving:
            return np.zeros(3)
        _, radius, angle0 = self._track
        angle = angle0 + TRACK_OMEGA * self._tick / self.control_hz
        return np.array([-math.sin(angle), math.cos(angle), 0.0]) * radius * TRACK_OMEGA

    def _move_target(self) -> None:
        """Put the tracked target where its circle has it at this tick."""
        centre, radius, angle0 = self._track
        angle = angle0 + TRACK_OMEGA * self._tick / self.control_hz
        self.model.body_pos[self._goal_body] = centre + radius * np.array(
            [math.cos(angle), math.sin(angle), 0.0]
        )
        mujoco.mj_kinematics(self.model, self.data)

    def _place_task_objects(self, rng: np.random.Generator) -> None:
        m, d = self.model, self.data
        if self.task.moving:
            r, az = rng.uniform(0.20, 0.26), rng.uniform(-0.4, 0.4)
            centre = np.array([r * math.cos(az), r * math.sin(az), rng.uniform(0.06, 0.16)])
            self._track = (centre, rng.uniform(0.04, 0.07), rng.uniform(-math.pi, math.pi))
            self._move_target()
            return
        if self.task.obstacle:
            self._place_obstacle(rng)
            return
        if not self.task.with_cube:
            r, az = rng.uniform(0.16, 0.30), rng.uniform(-0.6, 0.6)
            m.body_pos[self._goal_body] = [r * math.cos(az), r * math.sin(az), rng.uniform(0.04, 0.20)]
            return
        while True:
            cube_r, cube_az = rng.uniform(*self.scene.cube_radius), rng.uniform(*self.scene.cube_azimuth)
            zone_r, zone_az = rng.uniform(0.17, 0.27), rng.uniform(-0.6, 0.6)
            cube = np.array([cube_r * math.cos(cube_az), cube_r * math.sin(cube_az)])
            zone = np.array([zone_r * math.cos(zone_az), zone_r * math.sin(zone_az)])
            if np.linalg.norm(cube - zone) > 2.5 * ZONE_RADIUS:
                break
        yaw = rng.uniform(-math.pi / 4, math.pi / 4)
        d.qpos[self._cube_q : self._cube_q + 7] = [
            *cube,
            CUBE_HALF,
            math.cos(yaw / 2),
            0,
            0,
            math.sin(yaw / 2),
        ]
        m.body_pos[self._goal_body] = [*zone, 0.001]

    def _place_obstacle(self, rng: np.random.Generator) -> None:
        """Target on the side opposite the fingertip's start; the obstacle on the straight line
        between them (35-70% of the way), so the arm must pass it on one side or the other."""
        m, d = self.model, self.data
        mujoco.mj_kinematics(m, d)
        start = d.site_xpos[self._ee].copy()
        side = -1.0 if start[1] > 0 else 1.0
        r, az = rng.uniform(0.2, 0.26), side * rng.uniform(0.45, 0.65)
        goal = np.array([r * math.cos(az), r * math.sin(az), rng.uniform(0.05, 0.1)])
        m.body_pos[self._goal_body] = goal
        m.body_pos[self._obstacle_body] = start + rng.uniform(0.35, 0.7) * (goal - start)

    def _success(self) -> bool:
        if self.task.moving:
            near = np.linalg.norm(self.ee_pos - self.goal_pos) < TRACK_TOLERANCE
            self._on_target = self._on_target + 1 if near else 0
            return self._on_target >= TRACK_HOLD_TICKS
        if not self.task.with_cube:
            near = np.linalg.norm(self.ee_pos - self.goal_pos) < REACH_TOLERANCE
            return bool(near and not self._touched)
        cube = self.data.qpos[self._cube_q : self._cube_q + 3]
        in_zone = np.linalg.norm(cube[:2] - self.goal_pos[:2]) < ZONE_RADIUS
        resting = cube[2] < CUBE_HALF + 0.004
        return bool(in_zone and resting and not self._cube_held())

    def _outcome(self, success: bool) -> str:
        if self.task.with_cube:
            return pick_place_outcome(success, self._cube_moved, self._cube_lifted, self._cube_held())
        if success:
            return OUTCOME_SUCCESS
        return OUTCOME_OBSTACLE if self._touched else OUTCOME_TIMEOUT

    def _cube_held(self) -> bool:
        """Whether a fingertip pad touches the cube (placing means letting go)."""
        d = self.data
        for i in range(d.ncon):
            pair = {int(d.contact.geom1[i]), int(d.contact.geom2[i])}
            if self._cube_geom in pair and pair & self._pads:
                return True
        return False

    def _shaping(self) -> float:
        """Dense shaping in [-1, 0]: small when the tip (and cube) are near where they should be."""
        if not self.task.with_cube:
            return -min(1.0, float(np.linalg.norm(self.ee_pos - self.goal_pos)))
        cube = self.data.qpos[self._cube_q : self._cube_q + 3]
        reach = float(np.linalg.norm(self.ee_pos - cube))
        place = float(np.linalg.norm(cube[:2] - self.goal_pos[:2]))
        return -min(1.0, 0.5 * reach + place)

    # ---- randomisation ------------------------------------------------------------------------
    def _randomize(self, rng: np.random.Generator) -> None:
        m = self.model
        if not self.domain_randomization:
            self._offsets = np.zeros(6)
            return
        self._offsets = np.append(rng.uniform(-0.008, 0.008, 5), 0.0)  # about +-0.5 degree
        m.geom_rgba[m.geom("floor").id, :3] = rng.uniform(0.35, 0.75, 3)
        m.light_diffuse[:] *= rng.uniform(0.6, 1.2)
        m.light_pos[:] += rng.normal(0.0, 0.1, m.light_pos.shape)
        m.cam_pos[:] += rng.normal(0.0, 0.005, m.cam_pos.shape)
        m.cam_fovy[:] += rng.uniform(-2.0, 2.0, m.cam_fovy.shape)
        if self.task.with_cube:
            scale = rng.uniform(0.6, 1.6)
            m.body_mass[self._cube_body] *= scale
            m.body_inertia[self._cube_body] *= scale
            m.geom_friction[self._cube_geom, 0] *= rng.uniform(0.8, 1.2)
            red = rng.uniform(0.7, 1.0)
            m.geom_rgba[self._cube_geom, :3] = [red, rng.uniform(0.0, 0.3), rng.uniform(0.0, 0.3)]

    def _apply_scene(self) -> None:
        """Scale the cube's (randomised) mass, inertia and friction by the scene's factors; no
        draw from the seed's stream, so a scene changes no other part of the episode."""
        if not self.task.with_cube:
            return
        m = self.model
        m.body_mass[self._cube_body] *= self.scene.cube_mass_scale
        m.body_inertia[self._cube_body] *= self.scene.cube_mass_scale
        m.geom_friction[self._cube_geom, 0] *= self.scene.cube_friction_scale

    # ---- observation --------------------------------------------------------------------------
    def _observe(self) -> dict[str, Array]:
        d = self.data
        q = d.qpos[self._qadr] + self._offsets
        parts = [so101.rad_to_units(q), so101.velocity_to_units(d.qvel[self._vadr]), self.goal_pos]
        if self.task.moving:
            parts.append(self.goal_vel)
        if self.task.obstacle:
            parts.append(self.obstacle_pos)
        if self.privileged_state and self.task.with_cube:
            parts.append(self.cube_pose)
        if self.tip_position:
            parts.append(self.ee_pos)
        obs: dict[str, Array] = {"state": np.concatenate(parts).astype(np.float32)}
        for cam in self.cameras:
            obs[cam] = self.render_camera(cam)
        return obs

    def render_camera(self, camera: str) -> Array:
        """An (image_size, image_size, 3) uint8 frame from ``camera``; shadows and reflections off."""
        if self._renderer is None:
            self._renderer = make_renderer(self.model, self.image_size)
        self._renderer.update_scene(self.data, camera=camera)
        frame: Array = self._renderer.render()
        return frame

    def _info(self, success: bool) -> dict[str, Any]:
        info = {"is_success": success, "tick": self._tick, "clipped_actions": self.clipped_actions}
        if self.task.moving:
            info["on_target_ticks"] = self._on_target
        if self.task.obstacle:
            info["touched_obstacle"] = self._touched
        return info

    def joint_units(self) -> FloatArray:
        """Observed joint positions in action units (calibration offsets included)."""
        return so101.rad_to_units(self.data.qpos[self._qadr] + self._offsets)
