"""A lerobot :class:`~lerobot.cameras.camera.Camera` with no device behind it: uint8 (H, W, 3)
frames of the configured shape at the configured rate (:mod:`~robotrl.hardware.config_fake_camera`).

Frame k is captured at ``t0 + k / fps`` (t0: ``connect``) and rendered when first asked for: a
function of the clock instead of a reader thread's work, so a test that injects ``clock`` and
``sleep`` gets exact frames without waiting on wall time, and the actor pays no thread per camera.
The calls behave as lerobot's cameras do: ``read`` blocks until the next frame, ``async_read``
returns the newest frame not yet returned (waiting for one up to ``timeout_ms``, else
TimeoutError), ``read_latest`` peeks; misuse raises lerobot's connection errors.

Every frame carries its index in its first pixels (:func:`frame_index`), a diagonal pattern that
moves with the index, and, when an arm is wired in (``pose``, as the fake SO-101 does), a square
its first two joints place: frames differ over time and with the arm, as a real camera's do.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from lerobot.cameras.camera import Camera
from lerobot.utils.errors import DeviceAlreadyConnectedError, DeviceNotConnectedError
from robotrl.hardware.config_fake_camera import FakeCameraConfig

from robotrl.core.types import ImageArray

COUNTER_PIXELS = 4
"""The frame index, little-endian, one byte per pixel of the top row (all three channels)."""

_EPS = 1e-9  # a frame due at t is there at t, whatever the float rounding of (t - t0) * fps


def frame_index(frame: ImageArray) -> int:
    """The index of a fake camera's frame (0 at connect, one more per frame period)."""
    return int.from_bytes(bytes(frame[0, :COUNTER_PIXELS, 0]), "little")


class FakeCamera(Camera):  # type: ignore[misc]  # lerobot is untyped
    """Frames of ``config``'s shape every ``1 / config.fps`` seconds of ``clock``; ``sleep`` waits."""

    def __init__(
        self,
        config: FakeCameraConfig,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(config)
        self.config = config
        self.fps: int = config.fps
        self.width: int = config.width
        self.height: int = config.height
        self.pose: Callable[[], Sequence[float]] | None = None
        """The arm's joints as fractions of a turn (0..1), read when a frame is rendered; None:
        the frames show no arm."""
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        self._t0: float | None = None
        self._consumed = -1  # the newest frame read or async_read returned
        self._cached: tuple[int, ImageArray] | None = None
        ys, xs = np.mgrid[0 : self.height, 0 : self.width]
        self._diagonal = (xs + ys + 7 * config.seed).astype(np.int64)

    def __str__(self) -> str:
        return f"{type(self).__name__}({self.width}x{self.height}@{self.fps}, seed={self.config.seed})"

    @property
    def is_connected(self) -> bool:
        return self._t0 is not None

    @staticmethod
    def find_cameras() -> list[dict[str, Any]]:
        """Nothing to find: a fake camera exists as soon as its config does."""
        return []

    def connect(self, warmup: bool = True) -> None:
        """Start the frame clock; with ``warmup``, read one frame as lerobot's cameras do."""
        if self.is_connected:
            raise DeviceAlreadyConnectedError(f"{self} is already connected.")
        with self._lock:
            self._t0, self._consumed, self._cached = self._clock(), -1, None
        if warmup:
            self.read()

    def disconnect(self) -> None:
        self._check_connected()
        with self._lock:
            self._t0, self._cached = None, None

    def read(self) -> ImageArray:
        """The next frame: blocks until its period starts."""
        self._check_connected()
        with self._lock:
            k = max(self._index(self._clock()), self._consumed) + 1
        self._wait_until(self._due(k))
        return self._take(k)

    def async_read(self, timeout_ms: float = 200) -> ImageArray:
        """The newest frame not yet returned; waits up to ``timeout_ms`` for the next one, then
        TimeoutError (a camera slower than the caller)."""
        self._check_connected()
        with self._lock:
            now = self._clock()
            latest = self._index(now)
            if latest > self._consumed:
                return self._take_locked(latest)
            k = self._consumed + 1
        if self._due(k) - now > timeout_ms / 1e3:
            self._sleep(timeout_ms / 1e3)
            raise TimeoutError(f"Timed out waiting for frame from camera {self} after {timeout_ms} ms.")
        self._wait_until(self._due(k))
        return self._take(k)

    def read_latest(self, max_age_ms: int = 500) -> ImageArray:
        """The frame of the current period, at once (what lerobot's robots read every tick)."""
        self._check_connected()
        with self._lock:
            now = self._clock()
            k = self._index(now)
            age_ms = (now - self._due(k)) * 1e3
            if age_ms > max_age_ms:
                raise TimeoutError(
                    f"{self} latest frame is too old: {age_ms:.1f} ms (max allowed: {max_age_ms} ms)."
                )
            return self._frame(k)

    # -- frames ------------------------------------------------------------------------------

    def _check_connected(self) -> None:
        if not self.is_connected:
            raise DeviceNotConnectedError(f"{self} is not connected. Run `.connect()` first.")

    def _index(self, now: float) -> int:
        assert self._t0 is not None
        return max(0, math.floor((now - self._t0) * self.fps + _EPS))

    def _due(self, k: int) -> float:
        assert self._t0 is not None
        return self._t0 + k / self.fps

    def _wait_until(self, due: float) -> None:
        wait = due - self._clock()
        if wait > 0:
            self._sleep(wait)

    def _take(self, k: int) -> ImageArray:
        with self._lock:
            return self._take_locked(k)

    def _take_locked(self, k: int) -> ImageArray:
        self._consumed = max(self._consumed, k)
        return self._frame(k)

    def _frame(self, k: int) -> ImageArray:
        """Frame ``k``, rendered once (callers of the same period get the same array, as from a
        real camera's buffer)."""
        if self._cached is None or self._cached[0] != k:
            self._cached = (k, self._render(k))
        return self._cached[1]

    def _render(self, k: int) -> ImageArray:
        h, w = self.height, self.width
        frame = np.zeros((h, w, 3), np.uint8)
        frame[..., 0] = ((self._diagonal + 2 * k) % 64) * 4  # red stripes, 2 px further each frame
        if self.pose is not None:
            joints = self.pose()
            side = max(2, min(h, w) // 8)
            x = round(min(max(joints[0], 0.0), 1.0) * (w - side))
            y = round(min(max(joints[1], 0.0), 1.0) * (h - side))
            frame[y : y + side, x : x + side, 1] = 255  # a green square where the arm points
        counter = np.frombuffer((k % 2**32).to_bytes(COUNTER_PIXELS, "little"), np.uint8)
        frame[0, :COUNTER_PIXELS, :] = counter[:, None]
        return frame
