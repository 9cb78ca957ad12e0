"""Build the MuJoCo model of a task: the SO-101 arm on a floor, cameras, lights, task objects.

Contacts are kept to what the tasks need, for speed and for clean grasps: the arm's
links collide with the floor only, and the cube collides with the floor and the two
fingertip pads (the jaws' convex hulls would otherwise fill the gap between them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import numpy as np
from robotrl.sim.assets import ARM_XML, package_assets, simplified_mesh_dir
from robotrl.sim.so101 import Array

PHYSICS_TIMESTEP = 0.002
"""Upper bound of the physics step (s); the real step divides the control period evenly."""
CUBE_HALF = 0.0125
"""Half the cube's edge (m): a 25 mm cube, which the SO-101's jaws grip comfortably."""
ZONE_RADIUS = 0.04
"""Radius of the place zone (m)."""
OBSTACLE_RADIUS = 0.025
"""Radius of the avoid task's obstacle ball (m); visual only, touching is judged by distance."""
EE_SITE = "gripperframe"

# Contact bits: arm links (1) touch the floor; pads and cube (2) touch each other and the floor.
_ARM, _GRIP = 1, 2


@dataclass(frozen=True)
class SceneOptions:
    control_hz: float = 30.0
    image_size: int = 96
    with_cube: bool = False
    with_obstacle: bool = False


def substeps_for(control_hz: float) -> tuple[int, float]:
    """(physics steps per control tick, physics timestep) with timestep <= PHYSICS_TIMESTEP."""
    period = 1.0 / control_hz
    n = max(1, math.ceil(period / PHYSICS_TIMESTEP - 1e-9))
    return n, period / n


def look_at(pos: Array, target: Array) -> list[float]:
    """Camera ``xyaxes`` that make a camera at ``pos`` look at ``target``, z up."""
    fwd = target - pos
    fwd /= np.linalg.norm(fwd)
    right = np.cross(fwd, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, fwd)
    return [*right.tolist(), *up.tolist()]


FRONT_CAMERA_POS = np.array([0.5, 0.0, 0.32])
FRONT_CAMERA_TARGET = np.array([0.17, 0.0, 0.04])


def build_model(options: SceneOptions) -> mujoco.MjModel:
    """Compile the scene for ``options``."""
    spec = mujoco.MjSpec.from_file(str(package_assets() / ARM_XML))
    spec.meshdir = str(simplified_mesh_dir())
    _set_physics_and_visual(spec, options)
    _set_arm_contacts(spec)
    _add_floor_light_and_cameras(spec)
    _add_task_objects(spec.worldbody, options)
    return spec.compile()


def _set_physics_and_visual(spec: mujoco.MjSpec, options: SceneOptions) -> None:
    _, spec.option.timestep = substeps_for(options.control_hz)
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    spec.option.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    spec.option.impratio = 10.0
    spec.visual.global_.offwidth = max(640, options.image_size)
    spec.visual.global_.offheight = max(480, options.image_size)
    spec.visual.quality.shadowsize = 0
    spec.visual.quality.offsamples = 0  # multisampling costs more than it shows at 96x96 on a CPU
    spec.visual.headlight.ambient = [0.3, 0.3, 0.3]
    spec.visual.headlight.diffuse = [0.4, 0.4, 0.4]


def _set_arm_contacts(spec: mujoco.MjSpec) -> None:
    """The fingertip pads grip (they touch the cube and the floor); the rest of the arm touches
    the floor only."""
    for geom in spec.geoms:
        if geom.name in ("fixed_jaw_pad", "moving_jaw_pad"):
            geom.contype, geom.conaffinity = _GRIP, _GRIP
            geom.friction = [1.5, 0.01, 0.001]
        elif geom.contype:  # the arm's collision meshes
            geom.contype, geom.conaffinity = _ARM, 0


def _add_floor_light_and_cameras(spec: mujoco.MjSpec) -> None:
    world = spec.worldbody
    # The floor: a plane for contacts (hidden), a thin box to look at (a plane renders as a grid
    # of many quads, which costs a software rasteriser more than the whole arm).
    world.add_geom(
        name="floor_contact",
        type=mujoco.mjtGeom.mjGEOM_PLANE,
        size=[1.0, 1.0, 0.01],
        group=3,
        contype=0,
        conaffinity=_ARM | _GRIP,
    )
    _add_marker(
        world, "floor", mujoco.mjtGeom.mjGEOM_BOX, [1.0, 1.0, 0.001], [0.55, 0.5, 0.45, 1.0], [0, 0, -0.001]
    )
    world.add_light(name="key", pos=[0.3, -0.3, 1.2], dir=[-0.2, 0.25, -1.0], castshadow=False)
    world.add_camera(
        name="front",
        pos=FRONT_CAMERA_POS.tolist(),
        xyaxes=look_at(FRONT_CAMERA_POS.copy(), FRONT_CAMERA_TARGET),
        fovy=50.0,
    )
    # The wrist camera rides on the gripper beside the jaws, looking down the fingers (body -z).
    wrist = spec.body("gripper")
    wrist.add_camera(name="wrist", pos=[0.0, 0.05, -0.02], xyaxes=[1, 0, 0, 0, 1, 0], fovy=80.0)


def _add_marker(
    body: mujoco.MjsBody,
    name: str,
    kind: mujoco.mjtGeom,
    size: list[float],
    rgba: list[float],
    pos: list[float] | None = None,
) -> None:
    """A geom to look at that touches nothing."""
    placed = {} if pos is None else {"pos": pos}
    body.add_geom(name=name, type=kind, size=size, rgba=rgba, contype=0, conaffinity=0, **placed)


def _add_task_objects(world: mujoco.MjsBody, options: SceneOptions) -> None:
    """The goal marker (the reach target, a ball, or the place zone, a disc on the floor), the
    cube to place and the obstacle to avoid, as the task asks."""
    goal = world.add_body(name="goal", pos=[0.25, 0.0, 0.1])
    if options.with_cube:
        _add_marker(
            goal, "goal", mujoco.mjtGeom.mjGEOM_CYLINDER, [ZONE_RADIUS, 0.001, 0.0], [0.1, 0.7, 0.2, 1.0]
        )
        cube = world.add_body(name="cube", pos=[0.25, 0.0, CUBE_HALF])
        cube.add_freejoint(name="cube")
        cube.add_geom(
            name="cube",
            type=mujoco.mjtGeom.mjGEOM_BOX,
            size=[CUBE_HALF] * 3,
            rgba=[0.85, 0.15, 0.15, 1.0],
            mass=0.05,
            friction=[1.5, 0.01, 0.001],
            contype=_GRIP,
            conaffinity=_GRIP,
            condim=4,
        )
    else:
        _add_marker(goal, "goal", mujoco.mjtGeom.mjGEOM_SPHERE, [0.015, 0.0, 0.0], [0.9, 0.1, 0.1, 0.8])
    if options.with_obstacle:
        obstacle = world.add_body(name="obstacle", pos=[0.2, 0.0, 0.06])
        _add_marker(
            obstacle,
            "obstacle",
            mujoco.mjtGeom.mjGEOM_SPHERE,
            [OBSTACLE_RADIUS, 0.0, 0.0],
            [0.1, 0.3, 0.9, 0.8],
        )
