"""lerobot's SO-101 follower and leader on :mod:`~robotrl.hardware.fake_serial` servos.

Each device has its own servos in its process; with ``served: true`` its port is instead the
path of a :class:`~robotrl.hardware.fake_pty.ServoPty`, a chain served to several processes (the
actor and the arm supervisor) through lerobot's real serial port handler. The follower's fake
cameras (:mod:`~robotrl.hardware.fake_camera`) see its in-process servos: their frames move with the arm.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lerobot.robots.so_follower import SOFollower
from lerobot.teleoperators.so_leader import SOLeader
from robotrl.hardware.config_fake_so101 import FakeServoOptions, FakeSO101Config, FakeSO101LeaderConfig
from robotrl.hardware.fake_camera import FakeCamera
from robotrl.hardware.fake_serial import (
    RESOLUTION,
    FakeServoChain,
    attach_fake_servos,
    calibrated_chain,
    fake_calibration,
)


def _fake_bus(device: Any, options: FakeServoOptions) -> FakeServoChain | None:
    """In-process servos; with ``served``, just the calibration of the chain served on the port."""
    names = list(device.bus.motors)
    ids = [m.id for m in device.bus.motors.values()]
    if options.served:
        device.calibration = device.bus.calibration = fake_calibration(names, ids)
        return None
    lo, hi = options.latency_ms
    chain, calibration = calibrated_chain(
        names, ids, latency_s=(lo / 1e3, hi / 1e3), corrupt_prob=options.corrupt_prob, seed=options.seed
    )
    for servo in chain.servos.values():
        servo.actual += options.pose_degrees * RESOLUTION / 360.0
    device.calibration = calibration
    device.bus.calibration = calibration
    attach_fake_servos(device.bus, chain)
    return chain


def arm_pose(chain: FakeServoChain) -> Callable[[], list[float]]:
    """The servos' positions now, as fractions of a turn (what a fake camera draws the arm from)."""

    def pose() -> list[float]:
        snap = chain.snapshot()
        return [(snap[sid]["present"] % RESOLUTION) / RESOLUTION for sid in sorted(snap)]

    return pose


class FakeSO101(SOFollower):  # type: ignore[misc]  # lerobot is untyped
    config_class = FakeSO101Config
    name = "robotrl_fake_so101"

    def __init__(self, config: FakeSO101Config) -> None:
        super().__init__(config)
        self.servos = _fake_bus(self, config)
        if self.servos is not None:
            for camera in self.cameras.values():
                if isinstance(camera, FakeCamera):
                    camera.pose = arm_pose(self.servos)


class FakeSO101Leader(SOLeader):  # type: ignore[misc]
    config_class = FakeSO101LeaderConfig
    name = "robotrl_fake_so101_leader"

    def __init__(self, config: FakeSO101LeaderConfig) -> None:
        super().__init__(config)
        self.servos = _fake_bus(self, config)
