"""Demonstrations from a local LeRobotDataset as in-memory arrays, and chunk batches from them.

Pretraining reads every frame once (video decoding is the slow part, so it is
paid once, with a progress bar) and then samples training chunks from memory:
the H actions from a frame on, padded past the episode's end and masked there,
with a committed-prefix length drawn from [0, max_delay] (training-time RTC).
Rows past the end of an episode that ended in success can instead be trained as
holding the last action (``hold_after_success``): the sim ends an episode the tick
the task is solved, so without them the policy never learns to stay at the goal and
the chunk's tail after a near miss is unsupervised.
Batches use the keys and layout of ``ChunkPolicy.per_sample_loss``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from robotrl.core import keys
from robotrl.core.types import EnvSpec
from robotrl.data.lerobot_dataset import DatasetError, RecordedDataset


@dataclass
class Demos:
    """Every frame of a dataset: arrays indexed by frame, episodes as [start, end) ranges."""

    state: npt.NDArray[np.float32]  # (N, S)
    action: npt.NDArray[np.float32]  # (N, A)
    images: dict[str, npt.NDArray[np.uint8]]  # camera -> (N, H, W, 3)
    tasks: list[str]  # (N,)
    episode_bounds: list[tuple[int, int]]
    spec: EnvSpec
    episode_success: list[bool]
    """Whether each episode's last frame records success (False when the dataset lacks it)."""

    def without_privileged_state(self) -> Demos:
        """These demonstrations without the state columns a real arm has no sensor for
        (:data:`keys.PRIVILEGED_STATE_PREFIX`): what a policy with ``env.privileged_state=false``
        may read, whatever the dataset was recorded with."""
        names = self.spec.state_names
        keep = [i for i, n in enumerate(names) if not keys.privileged(n)]
        if len(keep) == len(names):
            return self
        spec = dataclasses.replace(self.spec, state_names=tuple(names[i] for i in keep))
        return dataclasses.replace(self, state=np.ascontiguousarray(self.state[:, keep]), spec=spec)

    def frames_of(self, episodes: Sequence[int]) -> npt.NDArray[np.int64]:
        frames: npt.NDArray[np.int64] = np.concatenate(
            [np.arange(*self.episode_bounds[e], dtype=np.int64) for e in episodes]
        )
        return frames

    def stats(self, frames: npt.NDArray[np.int64]) -> dict[str, npt.NDArray[np.float32]]:
        """State and action statistics over ``frames`` (the training split): mean and std (what
        every policy reads), range and 1%/99% quantiles (for lerobot policies normalising so)."""
        out: dict[str, npt.NDArray[np.float32]] = {}
        for name, column in (("state", self.state[frames]), ("action", self.action[frames])):
            q01, q99 = np.quantile(column, [0.01, 0.99], axis=0).astype(np.float32)
            out |= {
                f"{name}_mean": column.mean(0),
                f"{name}_std": column.std(0),
                f"{name}_min": column.min(0),
                f"{name}_max": column.max(0),
                f"{name}_q01": q01,
                f"{name}_q99": q99,
            }
        return out


def load_demos(root: str | Path, cameras: Sequence[str] | None = None) -> Demos:
    """Read a local LeRobotDataset (offline) into memory.

    ``cameras`` None reads every camera of the dataset; a camera it lacks is an error.
    """
    ds = RecordedDataset(root)
    if len(ds) == 0:
        raise DatasetError(f"{ds.where}: has no frames")
    chosen = list(ds.cameras if cameras is None else cameras)
    images = ds.images(chosen)
    state, action, tasks = ds.column("state"), ds.column("action"), ds.tasks()
    success = ds.column("terminated")  # lerobot's next.success; False where the dataset lacks it
    episode = ds.episode_index
    n = len(ds)
    starts = np.flatnonzero(np.r_[True, episode[1:] != episode[:-1]])
    bounds = [(int(s), int(e)) for s, e in zip(starts, np.r_[starts[1:], n], strict=True)]
    spec = EnvSpec(
        name=ds.root.name,
        action_names=ds.names("action"),
        action_low=tuple(float(x) for x in action.min(0)),
        action_high=tuple(float(x) for x in action.max(0)),
        state_names=ds.names("state"),
        camera_shapes={c: ds.camera_shape(c) for c in chosen},
        control_hz=ds.fps,
        max_episode_ticks=max(e - s for s, e in bounds),
        instruction=tasks[0],
    )
    return Demos(state, action, images, tasks, bounds, spec, [bool(success[e - 1]) for _, e in bounds])


class ChunkSampler:
    """Training chunks from :class:`Demos`: the frame's observation and the next H actions.

    ``state_noise`` adds Gaussian noise of that many training-data standard deviations to
    each sampled state (augmentation for training; validation samplers keep it at 0).
    """

    def __init__(
        self,
        demos: Demos,
        frames: npt.NDArray[np.int64],
        horizon: int,
        max_delay: int,
        *,
        hold_after_success: bool = False,
        state_noise: float = 0.0,
    ) -> None:
        if len(frames) == 0:
            raise DatasetError("no frames to sample from")
        self.demos, self.frames, self.horizon, self.max_delay = demos, frames, horizon, max_delay
        self.episode_end = np.empty(len(demos.state), np.int64)
        self.hold = np.zeros(len(demos.state), bool)  # rows past this frame's episode end are trained
        for (s, e), ok in zip(demos.episode_bounds, demos.episode_success, strict=True):
            self.episode_end[s:e] = e
            self.hold[s:e] = hold_after_success and ok
        self.state_sigma = (state_noise * demos.state[frames].std(0)).astype(np.float32)

    def batch(
        self, rng: np.random.Generator, size: int, device: str | torch.device = "cpu"
    ) -> dict[str, Any]:
        idx = rng.choice(self.frames, size=size)
        batch = self.batch_at(idx, rng.integers(0, self.max_delay + 1, size=size), device)
        if self.state_sigma.any():
            noise = rng.standard_normal((size, len(self.state_sigma))).astype(np.float32) * self.state_sigma
            batch[keys.STATE] = batch[keys.STATE] + torch.from_numpy(noise).to(device)
        return batch

    def batch_at(
        self,
        idx: npt.NDArray[np.int64],
        prefix_len: npt.NDArray[np.int64],
        device: str | torch.device = "cpu",
    ) -> dict[str, Any]:
        d = self.demos
        rows = idx[:, None] + np.arange(self.horizon)[None, :]
        mask = (rows < self.episode_end[idx][:, None]) | self.hold[idx][:, None]
        rows = np.minimum(rows, self.episode_end[idx][:, None] - 1)  # pad with the last action
        batch: dict[str, Any] = {
            keys.STATE: torch.from_numpy(d.state[idx]).to(device),
            keys.ACTION: torch.from_numpy(d.action[rows]).to(device),
            keys.ACTION_MASK: torch.from_numpy(mask).to(device),
            keys.PREFIX_LEN: torch.from_numpy(np.asarray(prefix_len, np.int64)).to(device),
            keys.TASK: [d.tasks[i] for i in idx],
        }
        for cam, frames in d.images.items():
            batch[keys.IMAGE_PREFIX + cam] = torch.from_numpy(frames[idx]).to(device)
        return batch


def split_episodes(n_episodes: int, val_fraction: float) -> tuple[list[int], list[int]]:
    """(train, validation) episode indices; the last episodes validate, at least one train episode."""
    n_val = min(round(n_episodes * val_fraction), n_episodes - 1) if n_episodes > 1 else 0
    if val_fraction > 0 and n_episodes > 1:
        n_val = max(n_val, 1)
    cut = n_episodes - n_val
    return list(range(cut)), list(range(cut, n_episodes))
