"""The fake camera behaves as a lerobot camera: registered type, frames of its shape at its rate,
lerobot's errors for misuse, async_read's timeout. Its clock is virtual: nothing waits on wall time."""

from __future__ import annotations

import numpy as np
import pytest
from lerobot.cameras.configs import CameraConfig
from lerobot.cameras.utils import make_cameras_from_configs
from lerobot.utils.errors import DeviceAlreadyConnectedError, DeviceNotConnectedError
from robotrl.hardware.config_fake_camera import FAKE_CAMERA, FakeCameraConfig
from robotrl.hardware.fake_camera import FakeCamera, frame_index

from robotrl.core.clock import VirtualClock


def camera(clock: VirtualClock, **fields: int) -> FakeCamera:
    """A camera whose waits move ``clock`` forward instead of sleeping."""
    return FakeCamera(FakeCameraConfig(**fields), clock=clock.now, sleep=clock.advance)


def test_lerobot_builds_it_from_its_registered_type():
    cfg = CameraConfig.get_choice_class(FAKE_CAMERA)(width=32, height=24, fps=15)
    cam = make_cameras_from_configs({"front": cfg})["front"]
    assert isinstance(cam, FakeCamera) and cfg.type == FAKE_CAMERA
    assert (cam.height, cam.width, cam.fps) == (24, 32, 15)
    with pytest.raises(ValueError, match="fps"):
        FakeCameraConfig(fps=0)
    with pytest.raises(ValueError, match="at least"):
        FakeCameraConfig(width=4)


def test_misuse_raises_lerobots_connection_errors():
    cam = camera(VirtualClock())
    for call in (cam.read, cam.async_read, cam.read_latest, cam.disconnect):
        with pytest.raises(DeviceNotConnectedError):
            call()
    cam.connect()
    assert cam.is_connected
    with pytest.raises(DeviceAlreadyConnectedError):
        cam.connect()
    cam.disconnect()
    assert not cam.is_connected
    with pytest.raises(DeviceNotConnectedError):
        cam.read()


def test_read_blocks_until_the_next_frame_period():
    clock = VirtualClock(100.0)
    cam = camera(clock, fps=20, width=40, height=30)
    cam.connect(warmup=False)
    clock.advance(0.01)  # a fifth of a period into frame 0
    frame = cam.read()
    assert frame.shape == (30, 40, 3) and frame.dtype == np.uint8
    assert frame_index(frame) == 1 and clock.now() == pytest.approx(100.05)
    assert [frame_index(cam.read()) for _ in range(3)] == [2, 3, 4]
    assert clock.now() == pytest.approx(100.2)


def test_async_read_returns_the_newest_unread_frame_or_times_out():
    clock = VirtualClock()
    cam = camera(clock, fps=10)
    cam.connect()  # the warm-up read takes frame 1
    clock.advance(0.25)  # frames 2 and 3 came meanwhile: the newest is returned at once
    assert frame_index(cam.async_read()) == 3 and clock.now() == pytest.approx(0.35)
    assert frame_index(cam.async_read(timeout_ms=100)) == 4  # waits the 0.05 s left for it
    assert clock.now() == pytest.approx(0.4)
    with pytest.raises(TimeoutError, match="after 50 ms"):
        cam.async_read(timeout_ms=50)  # frame 5 is 100 ms away
    assert clock.now() == pytest.approx(0.45)


def test_read_latest_peeks_without_consuming():
    clock = VirtualClock()
    cam = camera(clock, fps=10)
    cam.connect(warmup=False)
    clock.advance(0.12)
    first, again = cam.read_latest(), cam.read_latest()
    assert frame_index(first) == frame_index(again) == 1 and clock.now() == pytest.approx(0.12)
    assert frame_index(cam.async_read()) == 1  # still unread
    clock.advance(0.07)  # frame 1 is 90 ms old; a 10 fps camera shows nothing newer
    with pytest.raises(TimeoutError, match="too old"):
        cam.read_latest(max_age_ms=50)


def test_frames_change_over_time_with_the_arm_and_between_cameras():
    clock = VirtualClock()
    front, wrist = camera(clock, seed=0), camera(clock, seed=1)
    joints = [0.2, 0.3]
    front.pose = lambda: joints
    front.connect(warmup=False)
    wrist.connect(warmup=False)
    a = front.read_latest().copy()
    assert not np.array_equal(a, wrist.read_latest())  # the seed shifts the pattern
    clock.advance(1 / 30)
    b = front.read_latest().copy()
    assert frame_index(b) == 1 and not np.array_equal(a[1:], b[1:])  # the pattern moved
    green = np.argwhere(b[..., 1] == 255)
    joints[:] = [0.8, 0.7]  # the arm moved: the square follows at the next frame
    clock.advance(1 / 30)
    moved = np.argwhere(front.read_latest()[..., 1] == 255)
    assert len(green) == len(moved) > 0
    assert moved[:, 1].min() > green[:, 1].max() and moved[:, 0].min() > green[:, 0].max()
