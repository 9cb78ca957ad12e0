"""Tiny local LeRobotDatasets for policy tests, written with lerobot's own ``LeRobotDataset.create``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robotrl.core.types import ACTION_KEY, IMAGE_KEY_PREFIX, STATE_KEY, TASK_KEY

STATE_DIM, ACTION_DIM, IMAGE = 12, 6, 32
CAMERAS = ("front", "wrist")


def make_dataset(root: Path, episodes: int = 3, frames: int = 24, seed: int = 0) -> Path:
    """Episodes whose actions ramp smoothly from a state-given start (learnable, SO-101-like units)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    features = {
        STATE_KEY: {"dtype": "float32", "shape": (STATE_DIM,), "names": [f"s{i}" for i in range(STATE_DIM)]},
        ACTION_KEY: {
            "dtype": "float32",
            "shape": (ACTION_DIM,),
            "names": [f"j{i}" for i in range(ACTION_DIM)],
        },
        **{
            IMAGE_KEY_PREFIX + c: {
                "dtype": "image",
                "shape": (IMAGE, IMAGE, 3),
                "names": ["height", "width", "channels"],
            }
            for c in CAMERAS
        },
    }
    ds = LeRobotDataset.create("local/test", fps=30, features=features, root=root, use_videos=False)
    rng = np.random.default_rng(seed)
    for _ in range(episodes):
        start = rng.uniform(-40, 40, ACTION_DIM).astype(np.float32)
        velocity = rng.uniform(-1, 1, ACTION_DIM).astype(np.float32)
        for t in range(frames):
            pos = start + velocity * t
            ds.add_frame(
                {
                    STATE_KEY: np.concatenate([pos, velocity]).astype(np.float32),
                    ACTION_KEY: (pos + velocity).astype(np.float32),
                    **{
                        IMAGE_KEY_PREFIX + c: rng.integers(0, 256, (IMAGE, IMAGE, 3), dtype=np.uint8)
                        for c in CAMERAS
                    },
                    TASK_KEY: "pick up the cube",
                }
            )
        ds.save_episode()
    ds.finalize()
    return root
