"""lerobot configs of an SO-101 follower and leader on fake servos (``robotrl_fake_so101``...).

Dry runs of the whole real-arm path (``robotrl actor hardware.robot_type=robotrl_fake_so101``)
on a PC with no arm: lerobot's own SO-101 classes, the Feetech SDK, the safety layer,
the watchdog and the human keys, with only the serial port faked. Kept apart from the
classes, as lerobot's plugin convention wants (it finds ``FakeSO101`` from this module's name).
"""

from __future__ import annotations

from dataclasses import dataclass

from lerobot.robots.config import RobotConfig
from lerobot.robots.so_follower import SOFollowerRobotConfig
from lerobot.teleoperators.config import TeleoperatorConfig
from lerobot.teleoperators.so_leader import SOLeaderTeleopConfig


@dataclass
class FakeServoOptions:
    latency_ms: tuple[float, float] = (1.0, 3.0)
    """Range of one bus transaction's duration."""
    corrupt_prob: float = 0.0
    """Chance that a reply arrives corrupted (a read then fails after lerobot's retries)."""
    pose_degrees: float = 0.0
    """Where every joint starts (degrees from the middle of its range; gripper units above 50)."""
    seed: int = 0
    served: bool = False
    """The port is a pty serving a chain to several processes (``fake_pty.ServoPty``), not servos
    of this process; the options above are then the server's."""


@RobotConfig.register_subclass("robotrl_fake_so101")
@dataclass(kw_only=True)
class FakeSO101Config(SOFollowerRobotConfig, FakeServoOptions):  # type: ignore[misc]  # lerobot is untyped
    port: str = "fake"


@TeleoperatorConfig.register_subclass("robotrl_fake_so101_leader")
@dataclass(kw_only=True)
class FakeSO101LeaderConfig(SOLeaderTeleopConfig, FakeServoOptions):  # type: ignore[misc]
    port: str = "fake"
