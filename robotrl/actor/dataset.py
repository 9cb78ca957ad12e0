"""The actor's episodes as a LeRobotDataset (``actor.record_dataset=DIR``), written off the
control thread.

The recorder is a :data:`~robotrl.actor.recorder.TransitionSink`: the control loop hands it
batches of transitions, which go on a bounded queue and return at once; a writer thread
turns them into lerobot frames holding every transition column (robotrl.core.columns: state,
cameras, executed and proposed action, reward, done, policy version, chunk id, row in the
chunk, delay, intervention, actor episode, tick, times) plus each episode's reset seed, and
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

from robotrl.core.columns import COLUMNS
from robotrl.core.types import EnvSpec, Transition
from robotrl.data.lerobot_dataset import SEED_FEATURE, DatasetWriter

log = logging.getLogger(__name__)

MAX_PENDING_FRAMES = 4096
"""Frames the writer may lag behind the control loop (about 2 min at 30 Hz; ~230 MB with two
96x96 cameras) before a wall-clock actor drops and counts."""


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
        self._dataset = DatasetWriter(
            self.root,
            repo_id,
            spec.control_hz,
            [c.name for c in COLUMNS],
            (spec.state_names, spec.action_names),
            spec.camera_shapes,
            video,
            extra={SEED_FEATURE: "int64"},
        )
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
        values = {c.name: c.of(t) for c in COLUMNS}
        values["instruction"] = t.observation.instruction or self.spec.instruction
        self._dataset.add(values, extra={SEED_FEATURE: self.seed_base + t.episode_id})
        self._episode = t.episode_id
        self.frames += 1
        if t.done:
            self._save()

    def _save(self) -> None:
        self._dataset.save_episode()
        self.episodes += 1
        self._episode = None
