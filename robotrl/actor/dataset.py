"""The actor's episodes as a LeRobotDataset (``actor.record_dataset=DIR``), written off the
control thread.

The recorder is a :data:`~robotrl.actor.recorder.TransitionSink`: the control loop hands it
batches of transitions, which go on a bounded queue and return at once; a writer thread
turns them into lerobot frames (state, cameras, executed action, reward, done, success)
plus the actor's stamps as extra columns (proposed action, policy version, chunk id,
row in the chunk, delay, intervention, reset seed, actor episode, tick, times), and
saves each episode when it ends. In wall-clock time a full queue drops the batch and
counts it (the robot never waits on a disk); in virtual time the loop waits instead,
so nothing is ever lost. The dataset layout is ``robotrl record``'s, so pretraining,
``robotrl replay`` and lerobot's own tools read it.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

from robotrl.core.types import ACTION_KEY, IMAGE_KEY_PREFIX, STATE_KEY, TASK_KEY, EnvSpec, Transition

log = logging.getLogger(__name__)

MAX_PENDING_FRAMES = 4096
"""Frames the writer may lag behind the control loop (about 2 min at 30 Hz; ~230 MB with two
96x96 cameras) before a wall-clock actor drops and counts."""


def _scalar(dtype: str) -> dict[str, Any]:
    return {"dtype": dtype, "shape": (1,), "names": None}


def actor_columns(spec: EnvSpec) -> dict[str, dict[str, Any]]:
    """The extra lerobot features of an actor recording."""
    return {
        "proposed_action": {
            "dtype": "float32",
            "shape": (spec.action_dim,),
            "names": list(spec.action_names),
        },
        "policy_version": _scalar("int64"),
        "chunk_id": _scalar("int64"),
        "index_in_chunk": _scalar("int64"),
        "delay_ticks": _scalar("int64"),
        "intervention": _scalar("bool"),
        "seed": _scalar("int64"),
        "actor_episode": _scalar("int64"),
        "tick": _scalar("int64"),
        "obs_time": _scalar("float64"),
        "action_time": _scalar("float64"),
    }


class DatasetRecorder:
    """Writes transitions into a new LeRobotDataset at ``root`` from a background thread.

    ``seed_base``: episode ``i`` was reset with seed ``seed_base + i`` (how the actor runs).
    ``block``: wait for room instead of dropping (virtual time, where waiting costs nothing).
    """

    def __init__(
        self,
        root: str | Path,
        spec: EnvSpec,
        *,
        seed_base: int,
        block: bool,
        video: bool = True,
        overwrite: bool = False,
        repo_id: str = "local/actor",
        max_pending_frames: int = MAX_PENDING_FRAMES,
    ) -> None:
        from robotrl.sim.record import create_dataset, dataset_features

        self.root = Path(root)
        if self.root.exists():
            if not overwrite:
                raise FileExistsError(
                    f"actor.record_dataset: {self.root} exists; pick another folder or set "
                    "actor.record_overwrite=true"
                )
            shutil.rmtree(self.root)
        self.spec = spec
        self.seed_base = seed_base
        self.block = block
        self.max_pending = max_pending_frames
        features = dataset_features(
            spec.state_names, spec.camera_shapes, video, spec.action_names, actor_columns(spec)
        )
        self._dataset = create_dataset(self.root, repo_id, spec.control_hz, features, video)
        self._pending: deque[list[Transition] | None] = deque()
        self._pending_frames = 0
        self._cond = threading.Condition()
        self._episode: int | None = None  # actor episode id of the frames in the episode buffer
        self.frames = 0
        """Frames written."""
        self.episodes = 0
        """Episodes saved."""
        self.dropped = 0
        """Frames dropped (queue full in wall-clock time, or after a write error)."""
        self.error: str | None = None
        self._thread = threading.Thread(target=self._run, name="dataset-writer", daemon=True)
        self._thread.start()

    # -- control thread ---------------------------------------------------------------

    def __call__(self, transitions: list[Transition]) -> None:
        """Queue a batch; returns at once (wall clock) or once there is room (virtual time)."""
        n = len(transitions)
        with self._cond:
            while self.block and self._full(n) and self.error is None:
                self._cond.wait()
            if self.error is not None or self._full(n):
                self.dropped += n
                return
            self._pending.append(list(transitions))
            self._pending_frames += n
            self._cond.notify_all()

    def _full(self, n: int) -> bool:
        """No room for ``n`` more frames (an empty queue takes any batch)."""
        return bool(self._pending) and self._pending_frames + n > self.max_pending

    def close(self) -> dict[str, Any]:
        """Write everything queued, save the last (possibly unfinished) episode, finalise the
        dataset; returns the counts. Raises RuntimeError when writing failed."""
        with self._cond:
            self._pending.append(None)
            self._cond.notify_all()
        self._thread.join()
        if self.error is None:
            try:
                if self._episode is not None:
                    self._save()
                self._dataset.finalize()
            except Exception as exc:  # report below with the counts
                self.error = f"{type(exc).__name__}: {exc}"
        stats = self.stats()
        if self.error is not None:
            raise RuntimeError(f"actor.record_dataset={self.root}: writing failed: {self.error}")
        return stats

    def stats(self) -> dict[str, Any]:
        return {
            "path": str(self.root),
            "episodes": self.episodes,
            "frames": self.frames,
            "dropped_frames": self.dropped,
        }

    # -- writer thread ----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._cond.wait()
                batch = self._pending[0]
            if batch is None:
                return
            try:
                for t in batch:
                    self._add(t)
            except Exception as exc:
                log.exception("actor dataset writer failed")
                with self._cond:
                    self.error = f"{type(exc).__name__}: {exc}"
                    self.dropped += self._pending_frames
                    self._pending.clear()
                    self._pending_frames = 0
                    self._cond.notify_all()
                return
            with self._cond:
                self._pending.popleft()
                self._pending_frames -= len(batch)
                self._cond.notify_all()

    def _add(self, t: Transition) -> None:
        if self._episode is not None and t.episode_id != self._episode:
            self._save()  # an episode stopped without a done flag (Ctrl-C, a failure)
        obs = t.observation
        frame: dict[str, Any] = {
            STATE_KEY: np.asarray(obs.state, np.float32),
            ACTION_KEY: np.asarray(t.action, np.float32),
            "next.reward": np.array([t.reward], np.float32),
            "next.done": np.array([t.done]),
            "next.success": np.array([t.terminated]),  # robotrl's envs terminate on success only
            TASK_KEY: obs.instruction or self.spec.instruction,
            "proposed_action": np.asarray(t.proposed_action, np.float32),
            "policy_version": np.array([t.policy_version], np.int64),
            "chunk_id": np.array([t.chunk_id], np.int64),
            "index_in_chunk": np.array([t.index_in_chunk], np.int64),
            "delay_ticks": np.array([t.delay_ticks], np.int64),
            "intervention": np.array([t.intervention]),
            "seed": np.array([self.seed_base + t.episode_id], np.int64),
            "actor_episode": np.array([t.episode_id], np.int64),
            "tick": np.array([t.tick], np.int64),
            "obs_time": np.array([t.obs_time], np.float64),
            "action_time": np.array([t.action_time], np.float64),
        }
        for cam in self.spec.camera_shapes:
            frame[IMAGE_KEY_PREFIX + cam] = obs.images[cam]
        self._dataset.add_frame(frame)
        self._episode = t.episode_id
        self.frames += 1
        if t.done:
            self._save()

    def _save(self) -> None:
        self._dataset.save_episode()
        self.episodes += 1
        self._episode = None
