"""lerobot's real SO-101 follower and leader classes whose serial ports are faked.

Everything above the serial port is real: lerobot's robot and teleoperator classes,
its Feetech motor bus and the Feetech SDK, which build and parse every packet the fake
servos (:mod:`robotrl.hardware.fake_serial`) answer.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lerobot.robots.so_follower import SO101FollowerConfig
from lerobot.robots.utils import make_robot_from_config
from lerobot.teleoperators.so_leader import SO101LeaderConfig
from lerobot.teleoperators.utils import make_teleoperator_from_config
from robotrl.hardware.env import LerobotRobotEnv
from robotrl.hardware.events import HumanInput, KeyEvents
from robotrl.hardware.factory import build_limits, make_hardware_env
from robotrl.hardware.fake_serial import FakeServoChain, attach_fake_servos, calibrated_chain

from robotrl.config.schema import RobotRLConfig
from robotrl.core.types import Observation


def _fake(device: Any, **chain_kwargs: Any) -> FakeServoChain:
    names = list(device.bus.motors)
    ids = [m.id for m in device.bus.motors.values()]
    chain, calibration = calibrated_chain(names, ids, **chain_kwargs)
    device.calibration = calibration
    device.bus.calibration = calibration
    attach_fake_servos(device.bus, chain)
    return chain


def fake_follower(tmp_path: Path, **chain_kwargs: Any) -> tuple[Any, FakeServoChain]:
    """An SO-101 follower (lerobot's class) on fake servos, not yet connected."""
    cfg = SO101FollowerConfig(port="/dev/fake-follower", id="follower", calibration_dir=tmp_path / "cal")
    robot = make_robot_from_config(cfg)
    return robot, _fake(robot, **chain_kwargs)


def fake_leader(tmp_path: Path, **chain_kwargs: Any) -> tuple[Any, FakeServoChain]:
    """An SO-101 leader arm (lerobot's class) on fake servos, not yet connected."""
    cfg = SO101LeaderConfig(port="/dev/fake-leader", id="leader", calibration_dir=tmp_path / "cal")
    leader = make_teleoperator_from_config(cfg)
    return leader, _fake(leader, **chain_kwargs)


def pan_past_30_degrees(observation: Observation) -> bool:
    """A success detector (``hardware.success_detector=hardware_fakes:pan_past_30_degrees``)."""
    return bool(observation.state[0] > 30)


class KeyPipe:
    """Keys typed into the actor's terminal, as a test types them."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self.source = KeyEvents(fd=self.read_fd)

    def type(self, keys: str) -> None:
        os.write(self.write_fd, keys.encode())

    def close(self) -> None:
        os.close(self.write_fd)


def hardware_config(**safety: Any) -> RobotRLConfig:
    cfg = RobotRLConfig()
    cfg.hardware.robot_type = "so101_follower"
    cfg.hardware.keys = False
    cfg.actor.virtual_time = False
    cfg.env.cameras = []
    for name, value in safety.items():
        setattr(cfg.hardware.safety, name, value)
    return cfg


def fake_env(
    tmp_path: Path,
    keys: KeyPipe | None = None,
    teleop: Any = None,
    ticks: int = 300,
    detector: str | None = None,
    **safety: Any,
) -> tuple[LerobotRobotEnv, FakeServoChain]:
    """The real-arm env over a fake follower (built by the same factory as the real one)."""
    robot, chain = fake_follower(tmp_path)
    cfg = hardware_config(**safety)
    cfg.env.max_episode_ticks = ticks
    cfg.hardware.success_detector = detector
    env = make_hardware_env(cfg, robot=robot, teleop=teleop)
    if keys is not None:  # wired as make_hardware_env wires the terminal's keys
        env.human = HumanInput([keys.source])
        keys.source.on_estop = env.emergency_stop
    return env, chain


__all__ = ["KeyPipe", "build_limits", "fake_env", "fake_follower", "fake_leader", "hardware_config"]
