"""Checkpoints: the algorithm's state (networks, optimisers, counters) and the loop's counters.

A checkpoint is a folder ``<run_dir>/checkpoints/group-<N>/`` holding ``state.pt``
(tensors and plain values only, read back with ``torch.load(weights_only=True)``),
``counters.json`` (group, policy version, transitions ingested, format version) and
``policy.safetensors`` (the published policy tensors, for tools that only want the
policy) and, by default, ``buffers/`` (the replay as .npy files and JSON). It is
written to a temporary folder, fsynced, renamed, and ``latest`` names the newest complete
one, so neither a crash nor a power cut mid-write leaves a half checkpoint as latest; a
temporary folder a failed write or a crash left is deleted (after the failure, at start).

A state holding NaN or infinity is never written (:class:`NonFiniteStateError`). The two
newest checkpoints are kept, and ``last_good`` names the newest one whose state was checked
finite as it was written: the rotation never deletes it. A resuming learner takes the
newest checkpoint whose state reads back finite (:meth:`Checkpointer.newest_finite`).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from safetensors.numpy import save_file

from robotrl.core.fsync import Fsync
from robotrl.core.run_folder import (
    CHECKPOINT_COUNTERS,
    CHECKPOINT_LATEST,
    CHECKPOINT_POLICY,
    CHECKPOINT_STATE,
    CHECKPOINTS,
    latest_checkpoint,
)
from robotrl.learner.guard import nonfinite_tensors

log = logging.getLogger(__name__)

FORMAT_VERSION = 2  # 2: counters.json names the weight version policy_version
KEEP = 2
BUFFERS = "buffers"
PUBLISHED = "published_version"
"""In the checkpoints folder: the newest policy version published, written before it is sent."""
LAST_GOOD = "last_good"
"""In the checkpoints folder: the name of the newest checkpoint whose state was checked finite."""


class NonFiniteStateError(ValueError):
    """A checkpoint was asked to hold NaN or infinity; nothing was written."""


TMP_PREFIX = ".tmp-"


@dataclass
class Counters:
    """What the loop counts across restarts; the policy version only ever grows."""

    groups: int = 0
    policy_version: int = 0
    transitions: int = 0


class Checkpointer:
    """Writes and finds checkpoints under ``<run_dir>/checkpoints``; ``fsync`` makes each one
    reach the disk before ``latest`` names it."""

    def __init__(self, run_dir: str | Path, fsync: Fsync | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.root = self.run_dir / CHECKPOINTS
        self.fsync = fsync if fsync is not None else Fsync()

    def save(
        self,
        state: Mapping[str, Any],
        counters: Counters,
        policy_weights: Mapping[str, npt.NDArray[np.generic]],
        save_buffers: Callable[[Path], None] | None = None,
        extra_json: Mapping[str, Any] | None = None,
    ) -> Path:
        """Write one checkpoint; ``save_buffers`` (optional) writes the replay into its ``buffers/``,
        ``extra_json`` maps file names to JSON documents written beside (the transport ledger).
        A write that fails leaves no temporary folder behind. Raises :class:`NonFiniteStateError`,
        writing nothing, when a tensor is not finite."""
        bad = nonfinite_tensors(state) or nonfinite_tensors(policy_weights, "policy")
        if bad:
            raise NonFiniteStateError(
                f"checkpoint of group {counters.groups} not written: non-finite {', '.join(bad[:5])}"
            )
        self.root.mkdir(parents=True, exist_ok=True)
        # A resumed learner may save at the group count it resumed from: a fresh name each time,
        # so the checkpoint ``latest`` names is never deleted before its successor is in place.
        final = self.root / f"group-{counters.groups:08d}-{time.time_ns():x}"
        tmp = self.root / f"{TMP_PREFIX}{final.name}"
        try:
            self._write(tmp, state, counters, policy_weights, save_buffers, extra_json)
            tmp.rename(final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self.fsync.folder(self.root)
        for name in (LAST_GOOD, CHECKPOINT_LATEST):  # latest last: what follows it stays as before
            self.fsync.write_bytes(self.root / name, final.name.encode())
        for old in sorted(self.root.glob("group-*"))[:-KEEP]:
            if old.name != final.name:
                shutil.rmtree(old, ignore_errors=True)
        return final

    def last_good(self) -> Path | None:
        """The newest checkpoint whose state was checked finite as it was written, or None."""
        try:
            path = self.root / (self.root / LAST_GOOD).read_text().strip()
        except OSError:
            return None
        return path if (path / CHECKPOINT_COUNTERS).exists() else None

    def newest_finite(self) -> Path | None:
        """The checkpoint a learner resumes from: ``latest`` when its state reads back finite,
        else the newest other one that does (``last_good`` first), else None."""
        complete = sorted(
            (p for p in self.root.glob("group-*") if (p / CHECKPOINT_COUNTERS).exists()), reverse=True
        )
        seen: set[Path] = set()
        for path in (self.latest(), self.last_good(), *complete):
            if path is None or path in seen:
                continue
            seen.add(path)
            try:
                state = torch.load(path / CHECKPOINT_STATE, map_location="cpu", weights_only=True, mmap=True)
            except (OSError, RuntimeError) as exc:
                log.error("checkpoint %s cannot be read (%s): skipped", path, exc)
                continue
            bad = nonfinite_tensors(state)
            if not bad:
                return path
            log.error("checkpoint %s holds non-finite %s: skipped", path, ", ".join(bad[:5]))
        return None

    def _write(
        self,
        folder: Path,
        state: Mapping[str, Any],
        counters: Counters,
        policy_weights: Mapping[str, npt.NDArray[np.generic]],
        save_buffers: Callable[[Path], None] | None,
        extra_json: Mapping[str, Any] | None,
    ) -> None:
        folder.mkdir()
        torch.save(dict(state), folder / CHECKPOINT_STATE)
        # np.require, not np.ascontiguousarray: the latter makes a 0-d parameter 1-d.
        save_file(
            {k: np.require(v, requirements="C") for k, v in policy_weights.items()},
            str(folder / CHECKPOINT_POLICY),
        )
        if save_buffers is not None:
            save_buffers(folder / BUFFERS)
        for name, document in (extra_json or {}).items():
            (folder / name).write_text(json.dumps(document))
        meta = {"format_version": FORMAT_VERSION, **asdict(counters)}
        (folder / CHECKPOINT_COUNTERS).write_text(json.dumps(meta, indent=1))
        self.fsync.tree(folder)

    def remove_leftovers(self) -> None:
        """Delete temporary folders and pointers a crashed writer left behind (call it from the
        learner that writes here, at start: a reader must not delete a live writer's work)."""
        for leftover in self.root.glob(f"{TMP_PREFIX}*"):
            shutil.rmtree(leftover, ignore_errors=True)
        for pointer in self.root.glob(".*.tmp"):
            pointer.unlink(missing_ok=True)

    def note_published(self, policy_version: int) -> None:
        """Record ``policy_version`` as published, before it is sent: a learner restarted in this
        run folder, from an older checkpoint or from none, then numbers above every version its
        actors may hold."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.fsync.write_bytes(self.root / PUBLISHED, str(policy_version).encode())

    def published_version(self) -> int:
        """The newest policy version :meth:`note_published` recorded here (0: none)."""
        try:
            return int((self.root / PUBLISHED).read_text().strip())
        except (OSError, ValueError):
            return 0

    def latest(self) -> Path | None:
        return latest_checkpoint(self.run_dir)

    def load(self, path: Path, device: torch.device) -> tuple[dict[str, Any], Counters]:
        meta = json.loads((path / CHECKPOINT_COUNTERS).read_text())
        if meta.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"{path}: checkpoint format {meta.get('format_version')}, expected {FORMAT_VERSION}"
            )
        state = torch.load(path / CHECKPOINT_STATE, map_location=device, weights_only=True)
        counters = Counters(int(meta["groups"]), int(meta["policy_version"]), int(meta["transitions"]))
        return state, counters
