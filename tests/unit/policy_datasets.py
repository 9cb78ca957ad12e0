"""Tiny local LeRobotDatasets for policy tests, written with robotrl's own DatasetWriter."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robotrl.data.lerobot_dataset import DatasetWriter

STATE_DIM, ACTION_DIM, IMAGE = 12, 6, 32
CAMERAS = ("front", "wrist")


def make_dataset(
    root: Path, episodes: int = 3, frames: int = 24, seed: int = 0, state_names: list[str] | None = None
) -> Path:
    """Episodes whose actions ramp smoothly from a state-given start (learnable, SO-101-like units);
    ``state_names`` (STATE_DIM of them) names the state columns."""
    names = (state_names or [f"s{i}" for i in range(STATE_DIM)], [f"j{i}" for i in range(ACTION_DIM)])
    cameras = {c: (IMAGE, IMAGE, 3) for c in CAMERAS}
    ds = DatasetWriter(
        root, "local/test", 30, ("state", "images", "instruction", "action"), names, cameras, False
    )
    rng = np.random.default_rng(seed)
    for _ in range(episodes):
        start = rng.uniform(-40, 40, ACTION_DIM).astype(np.float32)
        velocity = rng.uniform(-1, 1, ACTION_DIM).astype(np.float32)
        for t in range(frames):
            pos = start + velocity * t
            ds.add(
                {
                    "state": np.concatenate([pos, velocity]),
                    "action": pos + velocity,
                    "images": {c: rng.integers(0, 256, (IMAGE, IMAGE, 3), dtype=np.uint8) for c in CAMERAS},
                    "instruction": "pick up the cube",
                }
            )
        ds.save_episode()
    ds.finalize()
    return root
