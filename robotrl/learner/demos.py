"""Demonstrations for the anchor buffer, read from a local LeRobotDataset (never a hub download).

Each episode becomes one :class:`TransitionBatch`: ``observation.state``, every
camera of the spec (``observation.images.<cam>``), ``action`` and ``task``; no
policy produced it (version -1) and no delay was measured (-1, so the replay draws a
prefix length). Demonstrations end in success: the last frame terminates the
episode and carries ``next.reward`` when the dataset has it, else ``success_reward``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from rich.progress import track

from robotrl.core.batch import TransitionBatch
from robotrl.core.types import ACTION_KEY, IMAGE_KEY_PREFIX, STATE_KEY
from robotrl.learner.replay import ReplaySpec

REWARD_FEATURE = "next.reward"


def _image(value: Any) -> npt.NDArray[np.uint8]:
    """A dataset frame (C,H,W float in [0,1] or uint8; or H,W,C) as H,W,3 uint8."""
    arr = np.asarray(value)
    if arr.ndim == 3 and arr.shape[0] == 3 and arr.shape[2] != 3:
        arr = arr.transpose(1, 2, 0)
    if arr.dtype != np.uint8:
        arr = np.clip(np.rint(arr.astype(np.float32) * 255.0), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(arr)


def _check_features(features: dict[str, Any], spec: ReplaySpec, where: str) -> None:
    need: dict[str, tuple[int, ...]] = {STATE_KEY: (spec.state_dim,), ACTION_KEY: (spec.action_dim,)}
    need.update({IMAGE_KEY_PREFIX + cam: tuple(shape) for cam, shape in spec.cameras.items()})
    for key, shape in need.items():
        if key not in features:
            raise ValueError(f"{where}: dataset has no feature {key!r} (it has {sorted(features)})")
        have = tuple(features[key]["shape"])
        if have != shape and not (key.startswith(IMAGE_KEY_PREFIX) and have == (shape[2], *shape[:2])):
            raise ValueError(f"{where}: feature {key!r} has shape {have}, the learner needs {shape}")


def load_demonstrations(path: str | Path, spec: ReplaySpec, success_reward: float) -> list[TransitionBatch]:
    """Every episode of the dataset at ``path`` as a TransitionBatch; clear errors for a mismatch."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root = Path(path)
    where = f"learner.demos_path={str(root)!r}"
    if not (root / "meta" / "info.json").exists():
        raise FileNotFoundError(f"{where}: not a local LeRobotDataset (no meta/info.json)")
    ds = LeRobotDataset(f"local/{root.name}", root=root, return_uint8=True)
    _check_features(dict(ds.features), spec, where)
    columns = ds.hf_dataset.with_format("numpy")
    episode_index = np.asarray(columns["episode_index"])
    has_reward = REWARD_FEATURE in ds.features
    out = []
    for ep in track(np.unique(episode_index).tolist(), description="loading demonstrations"):
        rows = np.flatnonzero(episode_index == ep)
        frames = [ds[int(i)] for i in rows]
        n = len(frames)
        state = np.stack([np.asarray(f[STATE_KEY], np.float32) for f in frames])
        action = np.stack([np.asarray(f[ACTION_KEY], np.float32) for f in frames])
        if has_reward:
            reward = np.array(
                [float(np.asarray(f[REWARD_FEATURE]).reshape(-1)[0]) for f in frames], np.float32
            )
        else:
            reward = np.zeros(n, np.float32)
            reward[-1] = success_reward
        tasks = [str(f.get("task", "")) for f in frames]
        instructions = tuple(dict.fromkeys(tasks))
        last = np.zeros(n, np.bool_)
        last[-1] = True
        zeros_f, no = np.zeros(n, np.float64), np.zeros(n, np.bool_)
        out.append(
            TransitionBatch(
                actor_id="demos",
                state=state,
                images={c: np.stack([_image(f[IMAGE_KEY_PREFIX + c]) for f in frames]) for c in spec.cameras},
                action=action,
                proposed_action=action,
                reward=reward,
                terminated=last,
                truncated=no,
                intervention=no,
                episode_id=np.full(n, ep, np.int64),
                tick=np.arange(n, dtype=np.int64),
                chunk_id=np.full(n, -1, np.int64),
                index_in_chunk=np.arange(n, dtype=np.int64),
                policy_version=np.full(n, -1, np.int64),
                delay_ticks=np.full(n, -1, np.int64),
                obs_time=zeros_f,
                action_time=zeros_f,
                obs_timestamp=zeros_f,
                instructions=instructions,
                instruction_index=np.array([instructions.index(t) for t in tasks], np.int32),
                next_rows=np.zeros(0, np.int64),
                next_state=np.zeros((0, spec.state_dim), np.float32),
                next_images={c: np.zeros((0, *s), np.uint8) for c, s in spec.cameras.items()},
                next_tick=np.zeros(0, np.int64),
                next_timestamp=np.zeros(0, np.float64),
            )
        )
    return out
