"""The SO-101 arm's joints and the units lerobot's ``so101_follower`` speaks.

lerobot reads and commands the follower in these units (``use_degrees=True``): the
five arm joints in degrees, zero at the middle of each joint's calibrated range (the
"new calibration" the MJCF uses, so sim radians map to degrees one to one), and the
gripper on 0..100, 0 closed and 100 open, linear over its range. A policy trained
on these actions sends valid commands to the real arm.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from robotrl.core.types import FloatArray

Array = npt.NDArray[Any]
"""Any numpy array (MuJoCo hands out untyped float64 arrays)."""

JOINTS: tuple[str, ...] = (
    "shoulder_pan",
    "shoulder_lift",
    "elbow_flex",
    "wrist_flex",
    "wrist_roll",
    "gripper",
)
"""Joint names in lerobot's order (also the MJCF joint and actuator names)."""
ACTION_NAMES: tuple[str, ...] = tuple(f"{j}.pos" for j in JOINTS)
"""Feature names of the action, as lerobot's follower names them."""

# Joint ranges of the MJCF (radians); the gripper's maps onto 0..100.
JOINT_RANGES_RAD: tuple[tuple[float, float], ...] = (
    (-1.91986, 1.91986),
    (-1.74533, 1.74533),
    (-1.69, 1.69),
    (-1.65806, 1.65806),
    (-2.74385, 2.84121),
    (-0.17453, 1.74533),
)
GRIPPER_RAD = JOINT_RANGES_RAD[5]

ACTION_LOW = np.array([math.degrees(lo) for lo, _ in JOINT_RANGES_RAD[:5]] + [0.0], dtype=np.float32)
ACTION_HIGH = np.array([math.degrees(hi) for _, hi in JOINT_RANGES_RAD[:5]] + [100.0], dtype=np.float32)

_RAD_PER_UNIT = np.array([math.pi / 180.0] * 5 + [(GRIPPER_RAD[1] - GRIPPER_RAD[0]) / 100.0])
_RAD_OFFSET = np.array([0.0] * 5 + [GRIPPER_RAD[0]])


def units_to_rad(values: Array) -> Array:
    """Joint values in lerobot units (degrees; gripper 0..100) to MJCF radians."""
    rad: Array = np.asarray(values, dtype=np.float64) * _RAD_PER_UNIT + _RAD_OFFSET
    return rad


def rad_to_units(q: Array) -> FloatArray:
    """MJCF radians to lerobot units (degrees; gripper 0..100)."""
    units: FloatArray = ((np.asarray(q, dtype=np.float64) - _RAD_OFFSET) / _RAD_PER_UNIT).astype(np.float32)
    return units


def velocity_to_units(qvel: Array) -> FloatArray:
    """Joint velocities (rad/s) to lerobot units per second."""
    units: FloatArray = (np.asarray(qvel, dtype=np.float64) / _RAD_PER_UNIT).astype(np.float32)
    return units
