"""The check every policy makes of an observation before inferring from it."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from robotrl.core import keys
from robotrl.core.types import EnvSpec, Observation


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


def spec_mismatch(policy_spec: EnvSpec, env_spec: EnvSpec) -> list[str]:
    """What keeps the robot or sim of ``env_spec`` from feeding a policy saved with
    ``policy_spec``: another state or action size, a camera it reads missing or of another shape."""
    problems = []
    if len(policy_spec.state_names) != len(env_spec.state_names):
        problems.append(
            f"it reads a state of {len(policy_spec.state_names)} columns, the robot gives "
            f"{len(env_spec.state_names)} (env.privileged_state and env.tip_position add columns)"
        )
    if len(policy_spec.action_names) != len(env_spec.action_names):
        problems.append(
            f"it acts on {len(policy_spec.action_names)} joints, the robot has {len(env_spec.action_names)}"
        )
    for cam, shape in policy_spec.camera_shapes.items():
        given = env_spec.camera_shapes.get(cam)
        if given is None:
            problems.append(f"it reads camera {cam!r}, the robot has {sorted(env_spec.camera_shapes)}")
        elif tuple(given) != tuple(shape):
            problems.append(f"it reads camera {cam!r} at {tuple(shape)}, the robot gives {tuple(given)}")
    return problems
