"""Episodes of a local LeRobotDataset as arrays: what every replay mode reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from robotrl.data.lerobot_dataset import SEED_FEATURE, DatasetError, RecordedDataset

VIEWED_COLUMNS = ("policy_version", "chunk_id", "delay_ticks", "intervention", "reward", "terminated")
"""Transition columns read when a dataset records them (actor recordings carry all)."""


@dataclass
class Episode:
    index: int
    rows: npt.NDArray[np.int64]
    """Row indices of its frames in the dataset."""
    state: npt.NDArray[np.float32]
    action: npt.NDArray[np.float32]
    extras: dict[str, npt.NDArray[Any]] = field(default_factory=dict)
    """The :data:`VIEWED_COLUMNS` the dataset records, and the reset ``seed`` of an actor recording."""

    def __len__(self) -> int:
        return len(self.rows)

    def reset_seed(self, base: int) -> int:
        """The seed the episode was reset with: an actor recording stores it; otherwise
        ``base + index``, as `robotrl record` numbers them."""
        seeds = self.extras.get(SEED_FEATURE)
        if seeds is not None and len(seeds):
            return int(np.asarray(seeds).reshape(-1)[0])
        return base + self.index

    @property
    def success(self) -> bool:
        """Whether a frame records success (lerobot's next.success, read as terminated)."""
        done = self.extras.get("terminated")
        return bool(done is not None and done.any())


def read_episodes(ds: RecordedDataset, wanted: list[int]) -> list[Episode]:
    """The wanted episodes (all when empty), state and action as float32 arrays."""
    state, action = ds.column("state"), ds.column("action")
    extras = {name: ds.column(name) for name in VIEWED_COLUMNS if ds.has(name)}
    seeds = ds.feature(SEED_FEATURE)
    if seeds is not None:
        extras[SEED_FEATURE] = seeds
    available = np.unique(ds.episode_index).tolist()
    chosen = wanted or available
    missing = sorted(set(chosen) - set(available))
    if missing:
        raise DatasetError(
            f"replay.episodes: {missing} not in the dataset (it has {len(available)} episodes)"
        )
    out = []
    for ep in chosen:
        rows = np.flatnonzero(ds.episode_index == ep)
        out.append(Episode(ep, rows, state[rows], action[rows], {k: v[rows] for k, v in extras.items()}))
    return out
