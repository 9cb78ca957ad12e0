"""The ``hardware`` group: a real arm through lerobot (robot, teleoperator, cameras, keys) and
``hardware.safety``, the limits every command passes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from robotrl.config.bounds import bounds


def lerobot_camera(fields_: object) -> None:
    """A camera entry must be a lerobot camera config with a type; ValueError says so."""
    if not isinstance(fields_, dict) or "type" not in fields_:
        raise ValueError("needs a lerobot camera config with a type (e.g. opencv)")


@dataclass
class SafetyConfig:
    joint_low: list[float] = field(default_factory=list)
    """Lowest command per joint (action units, the robot's action order); empty: the SO-101's ranges."""
    joint_high: list[float] = field(default_factory=list)
    """Highest command per joint (as many as ``joint_low``); empty: the SO-101's ranges."""
    max_step: float = field(default=4.0, metadata=bounds(ge=0, note="0: off"))
    """Largest change of a joint's command per tick (degrees; gripper units); 0 turns it off."""
    max_velocity: float = field(default=240.0, metadata=bounds(ge=0, note="0: off"))
    """Measured joint speed (units/s) above which the arm is held where it is; 0 turns it off."""
    workspace_low: list[float] = field(default_factory=list)
    """Lower corner (x, y, z metres, base frame) of the box the gripper stays in; empty: no box."""
    workspace_high: list[float] = field(default_factory=list)
    """Upper corner of the gripper's box."""
    watchdog_s: float = field(default=0.25, metadata=bounds(gt=0))
    """Hold the arm when no command was sent for this long (a stuck or crashed control loop)."""
    supervisor_s: float = field(default=1.0, metadata=bounds(ge=0, note="0: off"))
    """A separate process holds the arm within this long of the actor dying (SIGKILL, OOM) or
    hanging in a bus call; the STS3215 servos have no timeout of their own. 0 turns it off."""
    disable_torque_on_stop: bool = False
    """On an emergency stop or an actor exit, also switch torque off (the arm goes limp: support it)."""
    max_read_failures: int = field(default=10, metadata=bounds(gt=0))
    """Failed bus reads in a row before the actor stops (each one is counted and survived)."""


@dataclass
class HardwareConfig:
    robot_type: str | None = field(default=None, metadata=bounds(nonblank=True))
    """lerobot robot type (so101_follower, so100_follower, koch_follower, ...); null drives the sim."""
    robot_port: str = "/dev/ttyACM0"
    """Serial port of the follower arm (find it with `lerobot-find-port`)."""
    robot_id: str = "robotrl_follower"
    """lerobot id of the arm: names its calibration file."""
    calibration_dir: str | None = None
    """Folder of lerobot calibration files; null uses lerobot's default (~/.cache/huggingface/lerobot)."""
    cameras: dict[str, Any] = field(default_factory=dict, metadata=bounds(each=lerobot_camera))
    """Camera name -> lerobot camera config fields, e.g. front: {type: opencv, index_or_path: 0,
    width: 640, height: 480, fps: 30}. Names become observation.images.<name>."""
    robot_options: dict[str, Any] = field(default_factory=dict)
    """Further fields of lerobot's robot config (e.g. max_relative_target, use_degrees)."""
    teleop_type: str | None = None
    """lerobot teleoperator for interventions (so101_leader, gamepad, keyboard); null: none."""
    teleop_port: str = "/dev/ttyACM1"
    """Serial port of a leader arm."""
    teleop_id: str = "robotrl_leader"
    """lerobot id of the teleoperator (its calibration file)."""
    teleop_options: dict[str, Any] = field(default_factory=dict)
    """Further fields of lerobot's teleoperator config."""
    keys: bool = True
    """Read single keys in the actor's terminal: space e-stop, s success, f failure, i take over,
    n next episode."""
    reset_wait: bool = True
    """With keys: before each episode after the first, hold the arm until n (the scene is reset by hand)."""
    estop_event: str | None = None
    """A teleoperator event (lerobot TeleopEvents value, e.g. terminate_episode) that e-stops the arm."""
    success_reward: float = 1.0
    """Reward of a success (key, teleoperator button or detector)."""
    instruction: str = ""
    """The task instruction given to the policy (the sim's come from its task)."""
    success_detector: str | None = field(
        default=None, metadata=bounds(pattern=r"[^:]*:[^:]*", shape="'module:function'")
    )
    """'module:function' called with every Observation; True ends the episode as a success.
    Null: success comes from the human (key s or a teleoperator button)."""
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    """Limits every command passes."""
    check_seconds: float = field(default=0.0, metadata=bounds(ge=0, note="0: until Ctrl-C"))
    """`robotrl check-arm`: how long to read the limp arm (0: until Ctrl-C)."""
