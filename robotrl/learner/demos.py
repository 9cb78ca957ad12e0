"""Demonstrations for the anchor buffer, read from a local LeRobotDataset (never a hub download).

Each episode becomes one :class:`TransitionBatch` of the dataset's state, every camera of the
spec, action and task; every other column keeps its default (robotrl.core.columns): no
policy produced it (version -1) and no delay was measured (-1, so the replay draws a prefix
length). Demonstrations end in success: the last frame terminates the episode and carries
the recorded reward when the dataset has one, else ``success_reward``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from robotrl.core import keys
from robotrl.core.batch import TransitionBatch
from robotrl.data.lerobot_dataset import DatasetError, RecordedDataset
from robotrl.learner.replay import ReplaySpec

DEMO_COLUMNS = ("state", "action", "reward", "instruction")
"""What a demonstration contributes besides its cameras."""


def _check_shapes(ds: RecordedDataset, spec: ReplaySpec) -> None:
    have: list[tuple[str, tuple[int, ...], tuple[int, ...]]] = [
        (keys.STATE, ds.shape("state"), (spec.state_dim,)),
        (keys.ACTION, ds.shape("action"), (spec.action_dim,)),
    ]
    for cam, cam_shape in spec.cameras.items():
        if cam not in ds.cameras:
            raise DatasetError(f"{ds.where}: has no camera {cam!r} (it has {ds.cameras})")
        have.append((keys.IMAGE_PREFIX + cam, ds.camera_shape(cam), tuple(cam_shape)))
    for key, shape, need in have:
        if shape != need:
            raise DatasetError(f"{ds.where}: feature {key!r} has shape {shape}, the learner needs {need}")


def load_demonstrations(path: str | Path, spec: ReplaySpec, success_reward: float) -> list[TransitionBatch]:
    """Every episode of the dataset at ``path`` as a TransitionBatch; clear errors for a mismatch."""
    ds = RecordedDataset(path, "learner.demos_path")
    _check_shapes(ds, spec)
    out = []
    for batch in ds.batches(DEMO_COLUMNS, list(spec.cameras), "demos"):
        last = np.arange(len(batch)) == len(batch) - 1
        reward = batch.reward if ds.has("reward") else np.where(last, success_reward, 0.0).astype(np.float32)
        out.append(dataclasses.replace(batch, proposed_action=batch.action, reward=reward, terminated=last))
    return out
