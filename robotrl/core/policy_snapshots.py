"""Policies kept along a training run: the learner's snapshots (``learner.snapshot_every_groups``),
the policy tensors it published as of an update group and what it had done then, and
pretraining's (``pretrain.keep_every``), a policy folder per kept step. The learner
writes them (:mod:`robotrl.learner.snapshots`), the learning curve reads them
(:mod:`robotrl.experiment.curve`); their names are in :mod:`robotrl.core.run_folder`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save

from robotrl.core.fsync import NO_FSYNC
from robotrl.core.run_folder import (
    POLICY_SNAPSHOTS,
    PRETRAIN_SNAPSHOTS,
    read_json_object,
    replace_json,
    snapshot_weights_path,
)


@dataclass(frozen=True)
class PolicySnapshot:
    """What the learner had done when it published the policy of a snapshot: the learning
    curve places the snapshot's evaluation by it."""

    group: int
    policy_version: int
    transitions: int
    """Transitions ingested so far."""
    elapsed_s: float
    """Wall seconds since this learner process started."""
    time: float
    """Unix time of the snapshot (with ``elapsed_s``: when a restarted run's first learner started)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> PolicySnapshot:
        return cls(**{f.name: record[f.name] for f in fields(cls)})


def write_policy_snapshot(run_dir: Path, snapshot: PolicySnapshot, weights: Mapping[str, Any]) -> Path:
    """Write the tensors, then the JSON that marks the snapshot complete, each replaced by a
    rename: a reader never sees half a file, and a snapshot with JSON has its tensors."""
    path = snapshot_weights_path(run_dir, snapshot.group)
    path.parent.mkdir(parents=True, exist_ok=True)
    NO_FSYNC.write_bytes(path, save({k: np.ascontiguousarray(v) for k, v in weights.items()}))
    replace_json(path.with_suffix(".json"), snapshot.to_json())
    return path


def read_policy_snapshots(run_dir: Path) -> list[PolicySnapshot]:
    """Every complete snapshot of ``run_dir`` (its JSON written), by group."""
    snapshots = []
    for path in (run_dir / POLICY_SNAPSHOTS).glob("group-*.json"):
        record = read_json_object(path)
        if record is not None:
            snapshots.append(PolicySnapshot.from_json(record))
    return sorted(snapshots, key=lambda s: s.group)


def pretrain_snapshot(run_dir: Path, step: int) -> Path:
    """The folder of the policy ``robotrl pretrain`` kept at ``step`` (``pretrain.keep_every``)."""
    return run_dir / PRETRAIN_SNAPSHOTS / f"step-{step:08d}"


def pretrain_snapshots(run_dir: Path) -> dict[int, Path]:
    """Every policy kept by ``pretrain.keep_every``, by step, in step order."""
    found = sorted((run_dir / PRETRAIN_SNAPSHOTS).glob("step-*"))
    return {int(p.name.removeprefix("step-")): p for p in found if p.name.removeprefix("step-").isdigit()}
