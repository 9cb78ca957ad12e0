"""Build a real-arm :class:`~robotrl.hardware.env.LerobotRobotEnv` from ``hardware.*`` config.

The robot and teleoperator are lerobot's own classes, chosen by their registered
type names (``so101_follower``, ``koch_follower``, ``so101_leader``, ``gamepad``...);
lerobot registers a type only when its module is imported, so every module that
ships one is imported here, in one place.
"""

from __future__ import annotations

import importlib
import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np
from robotrl.hardware.env import LerobotRobotEnv, SuccessDetector, robot_spec
from robotrl.hardware.events import KEYS_HELP, EventSource, HumanInput, KeyEvents, TeleopButtonEvents
from robotrl.hardware.fake_serial import FakeSerial
from robotrl.hardware.safety import Kinematics, SafetyLayer, SafetyLimits
from robotrl.hardware.supervisor import SupervisorLink

from robotrl.config.hardware import HardwareConfig
from robotrl.config.schema import RobotRLConfig
from robotrl.core.types import EnvSpec, FloatArray

log = logging.getLogger(__name__)

ROBOT_MODULES = (
    "so_follower",
    "koch_follower",
    "omx_follower",
    "bi_so_follower",
    "lekiwi",
    "hope_jr",
    "reachy2",
    "openarm_follower",
    "bi_openarm_follower",
    "rebot_b601_follower",
    "bi_rebot_b601_follower",
)
CAMERA_MODULES = ("opencv", "realsense", "zmq", "reachy2_camera")
TELEOP_MODULES = (
    "so_leader",
    "koch_leader",
    "omx_leader",
    "gamepad",
    "keyboard",
    "bi_so_leader",
    "homunculus",
)


def _register(package: str, modules: tuple[str, ...]) -> None:
    for name in modules:
        try:
            importlib.import_module(f"{package}.{name}")
        except ImportError as exc:  # a robot whose optional SDK is not installed
            log.debug("lerobot %s.%s not available: %s", package, name, exc)


def _choice(base: Any, field: str, kind: str, type_name: str) -> Any:
    try:
        return base.get_choice_class(type_name)
    except (KeyError, ValueError):
        known = sorted(base.get_known_choices())
        raise ValueError(f"{field}: unknown lerobot {kind} {type_name!r}; known: {known}") from None


def make_robot(hw: HardwareConfig) -> Any:
    """lerobot's robot for ``hw.robot_type`` (not connected)."""
    from lerobot.cameras.configs import CameraConfig
    from lerobot.robots import RobotConfig, make_robot_from_config

    _register("lerobot.robots", ROBOT_MODULES)
    _register("robotrl.hardware", ("config_fake_so101", "config_fake_camera"))
    _register("lerobot.cameras", CAMERA_MODULES)
    if hw.robot_type is None:
        raise ValueError("hardware.robot_type: null drives the sim; name a lerobot robot for a real arm")
    cls = _choice(RobotConfig, "hardware.robot_type", "robot", hw.robot_type)
    cameras = {}
    for name, fields in hw.cameras.items():
        fields = dict(fields)
        cameras[name] = _choice(CameraConfig, f"hardware.cameras.{name}.type", "camera", fields.pop("type"))(
            **fields
        )
    options: dict[str, Any] = {"id": hw.robot_id, "cameras": cameras, **hw.robot_options}
    if "port" in getattr(cls, "__dataclass_fields__", {}):
        options["port"] = hw.robot_port
    if hw.calibration_dir:
        options["calibration_dir"] = Path(hw.calibration_dir)
    return make_robot_from_config(cls(**options))


def make_teleop(hw: HardwareConfig) -> Any | None:
    """lerobot's teleoperator for ``hw.teleop_type`` (not connected), or None."""
    if hw.teleop_type is None:
        return None
    from lerobot.teleoperators import TeleoperatorConfig, make_teleoperator_from_config

    _register("lerobot.teleoperators", TELEOP_MODULES)
    _register("robotrl.hardware", ("config_fake_so101",))
    cls = _choice(TeleoperatorConfig, "hardware.teleop_type", "teleoperator", hw.teleop_type)
    options: dict[str, Any] = {"id": hw.teleop_id, **hw.teleop_options}
    if "port" in getattr(cls, "__dataclass_fields__", {}):
        options["port"] = hw.teleop_port
    if hw.calibration_dir:
        options["calibration_dir"] = Path(hw.calibration_dir)
    return make_teleoperator_from_config(cls(**options))


def so101_kinematics() -> Kinematics:
    """Forward kinematics of the SO-101 (its MJCF, as the sim uses): joints -> gripper frame xyz."""
    import mujoco
    from robotrl.sim import so101
    from robotrl.sim.scene import EE_SITE, SceneOptions, build_model

    model = build_model(SceneOptions())
    data = mujoco.MjData(model)
    qpos_at = [model.jnt_qposadr[model.joint(j).id] for j in so101.JOINTS]
    site = model.site(EE_SITE).id

    def gripper_xyz(joints: FloatArray) -> FloatArray:
        data.qpos[qpos_at] = so101.units_to_rad(joints)
        mujoco.mj_kinematics(model, data)
        xyz: FloatArray = data.site_xpos[site].astype(np.float32)
        return xyz

    return gripper_xyz


def build_limits(hw: HardwareConfig, action_names: tuple[str, ...]) -> SafetyLimits:
    """Safety limits from config; joint ranges default to the SO-101's when the robot is one."""
    s = hw.safety
    n = len(action_names)
    if s.joint_low:
        low, high = np.asarray(s.joint_low, np.float32), np.asarray(s.joint_high, np.float32)
        if low.shape != (n,):
            raise ValueError(
                f"hardware.safety.joint_low: {len(s.joint_low)} entries, "
                f"the robot has {n}: {list(action_names)}"
            )
    else:
        from robotrl.sim import so101

        if action_names != so101.ACTION_NAMES:
            raise ValueError(
                f"hardware.safety.joint_low/joint_high: give the joint limits of {hw.robot_type} "
                f"({list(action_names)}); only the SO-101's are known"
            )
        low, high = so101.ACTION_LOW.copy(), so101.ACTION_HIGH.copy()
    box = (np.asarray(s.workspace_low, np.float32), np.asarray(s.workspace_high, np.float32))
    return SafetyLimits(
        low=low,
        high=high,
        max_step=np.full(n, s.max_step, np.float32) if s.max_step > 0 else None,
        max_velocity=np.full(n, s.max_velocity, np.float32) if s.max_velocity > 0 else None,
        workspace_low=box[0] if s.workspace_low else None,
        workspace_high=box[1] if s.workspace_high else None,
    )


def hardware_spec(cfg: RobotRLConfig) -> EnvSpec:
    """The configured arm's spec without connecting to it (the learner's host has no arm)."""
    robot = make_robot(cfg.hardware)
    limits = build_limits(cfg.hardware, tuple(robot.action_features))
    spec: EnvSpec = robot_spec(
        robot, limits, cfg.env.control_hz, cfg.env.max_episode_ticks, cfg.hardware.instruction
    )
    return spec


def load_success_detector(spec: str) -> SuccessDetector:
    """The function ``'module:function'`` names; a clear error when it cannot be found."""
    module, _, name = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"hardware.success_detector: cannot load {spec!r}: {exc}") from exc
    if not callable(fn):
        raise ValueError(f"hardware.success_detector: {spec!r} is not a function")
    detector: SuccessDetector = fn
    return detector


def make_hardware_env(
    cfg: RobotRLConfig, robot: Any | None = None, teleop: Any | None = None
) -> LerobotRobotEnv:
    """Connect the configured arm (and teleoperator) and wrap it; ``robot``/``teleop`` override
    the configured ones (tests pass lerobot robots whose serial port is faked)."""
    hw = cfg.hardware
    if cfg.actor.virtual_time:
        raise ValueError("actor.virtual_time: a real arm runs in wall-clock time; use actor=real_arm")
    robot = robot if robot is not None else make_robot(hw)
    teleop = teleop if teleop is not None else make_teleop(hw)
    if not robot.is_connected:
        robot.connect()
    if teleop is not None and not teleop.is_connected:
        teleop.connect()
    names = tuple(robot.action_features)
    limits = build_limits(hw, names)
    kinematics = so101_kinematics() if limits.workspace_low is not None else None
    keys = KeyEvents() if hw.keys else None
    sources: list[EventSource] = [keys] if keys is not None else []
    if hw.keys:
        print(KEYS_HELP, file=sys.stderr)
    if teleop is not None and hasattr(teleop, "get_teleop_events"):
        sources.append(TeleopButtonEvents(teleop, hw.estop_event))
    env = LerobotRobotEnv(
        robot,
        SafetyLayer(limits, kinematics=kinematics),
        control_hz=cfg.env.control_hz,
        max_episode_ticks=cfg.env.max_episode_ticks,
        instruction=hw.instruction,
        teleop=teleop,
        human=HumanInput(sources),
        success_detector=load_success_detector(hw.success_detector) if hw.success_detector else None,
        success_reward=hw.success_reward,
        watchdog_s=hw.safety.watchdog_s,
        disable_torque_on_stop=hw.safety.disable_torque_on_stop,
        max_read_failures=hw.safety.max_read_failures,
        wait_for_reset=hw.keys and hw.reset_wait,
    )
    if keys is not None:
        keys.on_estop = env.emergency_stop  # holds at once, not at the next tick
    if hw.safety.supervisor_s > 0:
        _supervise(hw, env)
    return env


def _supervise(hw: HardwareConfig, env: LerobotRobotEnv) -> None:
    """Start the out-of-process supervisor, unless no other process could reach the servos."""
    bus = getattr(env.robot, "bus", None)
    if bus is None:
        env.close()
        raise ValueError(
            f"hardware.safety.supervisor_s: {hw.robot_type} has no single motor bus to hold; set it to 0"
        )
    if isinstance(getattr(bus.port_handler, "ser", None), FakeSerial):
        log.warning("in-process fake servos: no other process can hold them, so no arm supervisor")
        return
    try:
        env.supervisor = SupervisorLink(hw, env.responsive)
    except BaseException:
        env.close()
        raise
