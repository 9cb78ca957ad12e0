"""lerobot camera config of a fake camera (type ``robotrl_fake_camera``), for dry runs with pixels.

``hardware.cameras={front: {type: robotrl_fake_camera, width: 96, height: 96, fps: 30}}`` gives
the fake SO-101 (or any lerobot robot) a camera that needs no device, so a pixel policy runs the
whole real-arm path on a PC with no arm and no camera. Kept apart from the class, as lerobot's
plugin convention wants: it finds ``FakeCamera`` in ``fake_camera`` from this module's name.
"""

from __future__ import annotations

from dataclasses import dataclass

from lerobot.cameras.configs import CameraConfig

FAKE_CAMERA = "robotrl_fake_camera"
"""The lerobot camera type name (``hardware.cameras.<name>.type``)."""

MIN_SIDE = 8
"""Smallest width and height: the frame counter takes the first 4 pixels of the top row."""


@CameraConfig.register_subclass(FAKE_CAMERA)
@dataclass(kw_only=True)
class FakeCameraConfig(CameraConfig):  # type: ignore[misc]  # lerobot is untyped
    fps: int = 30
    width: int = 96
    height: int = 96
    seed: int = 0
    """Phase of the moving pattern: two cameras with different seeds never show the same frame."""

    def __post_init__(self) -> None:
        if self.fps <= 0:
            raise ValueError(f"`fps` must be positive, but {self.fps} is provided.")
        if self.width < MIN_SIDE or self.height < MIN_SIDE:
            size = f"{self.width}x{self.height}"
            raise ValueError(f"`width` and `height` must be at least {MIN_SIDE}, but {size} is provided.")
