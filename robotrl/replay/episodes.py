"""Episodes of a local LeRobotDataset as arrays: what every replay mode reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from robotrl.core.types import ACTION_KEY, IMAGE_KEY_PREFIX, STATE_KEY

EXTRA_COLUMNS = (
    "policy_version",
    "chunk_id",
    "delay_ticks",
    "intervention",
    "next.reward",
    "next.success",
    "seed",
)
"""Columns read when a dataset has them (actor recordings carry all; ``seed`` is the reset seed)."""


@dataclass
class Episode:
    index: int
    rows: npt.NDArray[np.int64]
    """Row indices of its frames in the dataset."""
    state: npt.NDArray[np.float32]
    action: npt.NDArray[np.float32]
    extras: dict[str, npt.NDArray[Any]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.rows)

    def reset_seed(self, base: int) -> int:
        """The seed the episode was reset with: an actor recording stores it; otherwise
        ``base + index``, as `robotrl record` numbers them."""
        seeds = self.extras.get("seed")
        if seeds is not None and len(seeds):
            return int(np.asarray(seeds).reshape(-1)[0])
        return base + self.index

    @property
    def success(self) -> bool:
        done = self.extras.get("next.success")
        return bool(done is not None and len(done) and np.asarray(done).reshape(len(self), -1)[:, 0].any())


class DatasetError(ValueError):
    """The dataset is missing, not a LeRobotDataset, or lacks what a mode needs."""


def open_dataset(path: str | Path) -> Any:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root = Path(path)
    if not (root / "meta" / "info.json").exists():
        raise DatasetError(f"dataset={str(root)!r}: not a local LeRobotDataset (no meta/info.json)")
    return LeRobotDataset(f"local/{root.name}", root=root, return_uint8=True)


def read_episodes(ds: Any, wanted: list[int]) -> list[Episode]:
    """The wanted episodes (all when empty), state and action as float32 arrays."""
    for key in (STATE_KEY, ACTION_KEY):
        if key not in ds.features:
            raise DatasetError(f"the dataset has no {key!r} feature (it has {sorted(ds.features)})")
    cols = ds.hf_dataset.with_format("numpy")
    index = np.asarray(cols["episode_index"])
    state = np.asarray(cols[STATE_KEY], np.float32)
    action = np.asarray(cols[ACTION_KEY], np.float32)
    extras = {k: np.asarray(cols[k]) for k in EXTRA_COLUMNS if k in ds.features}
    available = np.unique(index).tolist()
    chosen = wanted or available
    missing = sorted(set(chosen) - set(available))
    if missing:
        raise DatasetError(
            f"replay.episodes: {missing} not in the dataset (it has {len(available)} episodes)"
        )
    out = []
    for ep in chosen:
        rows = np.flatnonzero(index == ep)
        out.append(Episode(ep, rows, state[rows], action[rows], {k: v[rows] for k, v in extras.items()}))
    return out


def cameras_of(ds: Any) -> list[str]:
    return [k[len(IMAGE_KEY_PREFIX) :] for k in ds.features if k.startswith(IMAGE_KEY_PREFIX)]
