"""Checkpoints: the algorithm's state (networks, optimisers, counters) and the loop's counters.

A checkpoint is a folder ``<run_dir>/checkpoints/group-<N>/`` holding ``state.pt``
(tensors and plain values only, read back with ``torch.load(weights_only=True)``),
``counters.json`` (group, policy version, transitions ingested, format version) and
``policy.safetensors`` (the published policy tensors, for tools that only want the
policy) and, when enabled, ``buffers/`` (the replay as .npy files and JSON). It is
written to a temporary folder and renamed, and ``latest`` names the
newest complete one, so a crash mid-write never leaves a half checkpoint as latest.
"""

from __future__ import annotations

import json
import os
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

FORMAT_VERSION = 2  # 2: counters.json names the weight version policy_version
KEEP = 2
BUFFERS = "buffers"


@dataclass
class Counters:
    """What the loop counts across restarts; the policy version only ever grows."""

    groups: int = 0
    policy_version: int = 0
    transitions: int = 0


class Checkpointer:
    def __init__(self, run_dir: str | Path) -> None:
        self.root = Path(run_dir) / "checkpoints"

    def save(
        self,
        state: Mapping[str, Any],
        counters: Counters,
        policy_weights: Mapping[str, npt.NDArray[np.generic]],
        save_buffers: Callable[[Path], None] | None = None,
        extra_json: Mapping[str, Any] | None = None,
    ) -> Path:
        """Write one checkpoint; ``save_buffers`` (optional) writes the replay into its ``buffers/``,
        ``extra_json`` maps file names to JSON documents written beside (the transport ledger)."""
        self.root.mkdir(parents=True, exist_ok=True)
        # A resumed learner may save at the group count it resumed from: a fresh name each time,
        # so the checkpoint ``latest`` names is never deleted before its successor is in place.
        final = self.root / f"group-{counters.groups:08d}-{time.time_ns():x}"
        tmp = self.root / f".tmp-{final.name}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        torch.save(dict(state), tmp / "state.pt")
        save_file(
            {k: np.ascontiguousarray(v) for k, v in policy_weights.items()}, str(tmp / "policy.safetensors")
        )
        meta = {"format_version": FORMAT_VERSION, **asdict(counters)}
        if save_buffers is not None:
            save_buffers(tmp / BUFFERS)
        for name, document in (extra_json or {}).items():
            (tmp / name).write_text(json.dumps(document))
        (tmp / "counters.json").write_text(json.dumps(meta, indent=1))
        tmp.rename(final)
        pointer = self.root / ".latest.tmp"
        pointer.write_text(final.name)
        os.replace(pointer, self.root / "latest")
        for old in sorted(self.root.glob("group-*"))[:-KEEP]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def latest(self) -> Path | None:
        pointer = self.root / "latest"
        if not pointer.exists():
            return None
        path = self.root / pointer.read_text().strip()
        return path if (path / "counters.json").exists() else None

    def load(self, path: Path, device: torch.device) -> tuple[dict[str, Any], Counters]:
        meta = json.loads((path / "counters.json").read_text())
        if meta.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"{path}: checkpoint format {meta.get('format_version')}, expected {FORMAT_VERSION}"
            )
        state = torch.load(path / "state.pt", map_location=device, weights_only=True)
        counters = Counters(int(meta["groups"]), int(meta["policy_version"]), int(meta["transitions"]))
        return state, counters
