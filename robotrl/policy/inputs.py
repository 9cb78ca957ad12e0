"""The check every policy makes of an observation before inferring from it."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from robotrl.core import keys
from robotrl.core.types import Observation


def check_observation_shapes(
    obs: Observation, state_shape: tuple[int, ...] | None, camera_shapes: Mapping[str, tuple[int, ...]]
) -> None:
    """Raise ValueError naming the key when ``obs`` does not fit: a state of another shape (not
    checked when ``state_shape`` is None), a camera missing, an image not uint8 of its shape."""
    state = np.asarray(obs.state)
    if state_shape is not None and state.shape != state_shape:
        raise ValueError(f"observation {keys.STATE!r}: expected shape {state_shape}, got {state.shape}")
    for cam, expected in camera_shapes.items():
        key = keys.IMAGE_PREFIX + cam
        if cam not in obs.images:
            raise ValueError(
                f"observation {key!r} is missing (this policy reads cameras {list(camera_shapes)})"
            )
        img = obs.images[cam]
        if img.shape != expected or img.dtype != np.uint8:
            raise ValueError(f"observation {key!r}: expected uint8 {expected}, got {img.dtype} {img.shape}")
