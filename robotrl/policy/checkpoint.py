"""The on-disk layout of a robotrl policy checkpoint, shared by every architecture.

A checkpoint is a directory: ``robotrl_policy.json`` (format version, architecture,
policy config, env spec) beside the architecture's own files (safetensors weights
and normalisation statistics for the built-in policy; lerobot's ``save_pretrained``
output for the adapter). The JSON says which architecture wrote the directory, so a
loader refuses a checkpoint of another architecture with a clear error instead of
failing on the first mismatched tensor.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from robotrl.config.policy import PolicyConfig, PolicyKind, PolicySize
from robotrl.core.types import EnvSpec

META_FILE = "robotrl_policy.json"
LEROBOT_CONFIG = "config.json"
FORMAT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded as asked; the message says why."""


def spec_to_dict(spec: EnvSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "action_names": list(spec.action_names),
        "action_low": list(spec.action_low),
        "action_high": list(spec.action_high),
        "state_names": list(spec.state_names),
        "camera_shapes": {k: list(v) for k, v in spec.camera_shapes.items()},
        "control_hz": spec.control_hz,
        "max_episode_ticks": spec.max_episode_ticks,
        "instruction": spec.instruction,
    }


def spec_from_dict(d: dict[str, Any]) -> EnvSpec:
    return EnvSpec(
        name=str(d["name"]),
        action_names=tuple(d["action_names"]),
        action_low=tuple(float(x) for x in d["action_low"]),
        action_high=tuple(float(x) for x in d["action_high"]),
        state_names=tuple(d["state_names"]),
        camera_shapes={k: (int(v[0]), int(v[1]), int(v[2])) for k, v in d["camera_shapes"].items()},
        control_hz=float(d["control_hz"]),
        max_episode_ticks=int(d["max_episode_ticks"]),
        instruction=str(d.get("instruction", "")),
    )


def policy_cfg_to_dict(cfg: PolicyConfig) -> dict[str, Any]:
    return {
        "kind": cfg.kind.value,
        "size": cfg.size.value,
        "horizon": cfg.horizon,
        "max_delay": cfg.max_delay,
        "flow_steps": cfg.flow_steps,
    }


def policy_cfg_from_dict(d: dict[str, Any]) -> PolicyConfig:
    return PolicyConfig(
        kind=PolicyKind(d["kind"]),
        size=PolicySize(d["size"]),
        horizon=int(d["horizon"]),
        max_delay=int(d["max_delay"]),
        flow_steps=int(d["flow_steps"]),
    )


def write_meta(path: Path, architecture: str, cfg: PolicyConfig, spec: EnvSpec, **extra: Any) -> None:
    path.mkdir(parents=True, exist_ok=True)
    meta = {
        "format_version": FORMAT_VERSION,
        "architecture": architecture,
        "policy": policy_cfg_to_dict(cfg),
        "spec": spec_to_dict(spec),
        **extra,
    }
    (path / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")


def read_meta(path: Path) -> dict[str, Any]:
    """The checkpoint's metadata; :class:`CheckpointError` when absent, unreadable or too new."""
    file = path / META_FILE
    if not file.is_file():
        raise CheckpointError(f"{path}: not a robotrl policy checkpoint (no {META_FILE})")
    try:
        meta: dict[str, Any] = json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{file}: not valid JSON ({exc})") from exc
    version = meta.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(f"{file}: format_version {version!r}, this robotrl reads {FORMAT_VERSION}")
    if "architecture" not in meta:
        raise CheckpointError(f"{file}: no 'architecture' field")
    return meta


def expect_architecture(path: Path, meta: dict[str, Any], architecture: str) -> None:
    found = meta["architecture"]
    if found != architecture:
        raise CheckpointError(
            f"{path}: checkpoint of architecture {found!r}, cannot load it as {architecture!r}"
        )


def lerobot_policy_dir(path: str | Path) -> Path | None:
    """The folder holding a lerobot policy's ``config.json`` at ``path``: ``path`` itself (a
    ``save_pretrained`` folder, or one laid out as a hub snapshot), or its ``pretrained_model``
    (a step folder of a ``lerobot-train`` checkpoint, such as ``checkpoints/last``); None if neither."""
    src = Path(path)
    for candidate in (src, src / "pretrained_model"):
        if (candidate / LEROBOT_CONFIG).is_file():
            return candidate
    return None
