"""Build, load and save chunk policies by config: the names other parts import.

``build_policy`` is what the actor, learner and pretraining call: a fresh built-in
policy, or a checkpoint when ``policy.path`` is set (a robotrl checkpoint directory,
or a lerobot ``save_pretrained`` directory for ``policy.kind=lerobot``). The
lerobot adapter is imported only when asked for, since lerobot's import is slow.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from robotrl.config.policy import PolicyConfig, PolicyKind
from robotrl.core.protocols import ChunkPolicy
from robotrl.core.types import EnvSpec
from robotrl.policy.checkpoint import META_FILE, CheckpointError, lerobot_policy_dir, read_meta
from robotrl.policy.flow import ARCHITECTURE as FLOW_ARCHITECTURE
from robotrl.policy.flow import FlowChunkPolicy

LEROBOT_ARCHITECTURE = "robotrl.lerobot"


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when a CUDA device is present, else 'cpu'; anything else unchanged."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def inference_threads() -> int:
    """torch intra-op threads for a batch-1 inference worker: half the cores, at most 4.

    On a 2-core machine that is one: a second thread contends with the control loop and
    made chunk inference many times slower in our measurements.
    """
    return max(1, min(4, (os.cpu_count() or 2) // 2))


def build_policy(cfg: PolicyConfig, spec: EnvSpec) -> ChunkPolicy:
    """The policy ``cfg`` describes, for an env of ``spec``, on ``cfg.device``.

    With ``cfg.path`` the checkpoint is loaded and checked against ``cfg`` and
    ``spec`` (architecture, size, horizon, action dimension), so a run never
    silently uses a policy other than the one its config names.
    """
    device = resolve_device(cfg.device)
    if cfg.kind is PolicyKind.lerobot:
        if not cfg.path:
            raise CheckpointError("policy.path: a lerobot policy needs a local directory (no hub downloads)")
        from robotrl.policy.lerobot import LerobotChunkPolicy

        adapter: ChunkPolicy = LerobotChunkPolicy.load(cfg.path, spec=spec, cfg=cfg, device=device)
        return adapter
    if not cfg.path:
        policy = FlowChunkPolicy(spec, cfg).to(device)
        policy.eval()
        return policy
    loaded = load_policy(cfg.path, device)
    if not isinstance(loaded, FlowChunkPolicy):
        raise CheckpointError(f"policy.path={cfg.path}: not a built-in flow checkpoint, but policy.kind=flow")
    _check_matches(loaded, cfg, spec)
    return loaded


def _check_matches(policy: FlowChunkPolicy, cfg: PolicyConfig, spec: EnvSpec) -> None:
    wrong = []
    if policy.cfg.size is not cfg.size:
        wrong.append(f"size {policy.cfg.size.value} (config asks {cfg.size.value})")
    if policy.horizon != cfg.horizon:
        wrong.append(f"horizon {policy.horizon} (config asks {cfg.horizon})")
    if policy.action_dim != spec.action_dim or policy.spec.state_dim != spec.state_dim:
        wrong.append(
            f"action/state dims {policy.action_dim}/{policy.spec.state_dim} "
            f"(env has {spec.action_dim}/{spec.state_dim})"
        )
    if dict(policy.spec.camera_shapes) != dict(spec.camera_shapes):
        wrong.append(f"cameras {dict(policy.spec.camera_shapes)} (env has {dict(spec.camera_shapes)})")
    if wrong:
        raise CheckpointError(f"policy.path={cfg.path}: checkpoint has " + "; ".join(wrong))
    apply_inference_settings(policy, cfg)


def apply_inference_settings(policy: ChunkPolicy, cfg: PolicyConfig) -> None:
    """Inference-time settings come from the config, not the checkpoint: a flow policy's
    integration steps and noise scale."""
    if isinstance(policy, FlowChunkPolicy):
        policy.cfg.flow_steps = cfg.flow_steps
        policy.cfg.noise_scale = cfg.noise_scale


def trained_max_delay(policy: ChunkPolicy) -> int | None:
    """The longest committed prefix a built-in flow policy was trained to continue; None for
    other policies (a lerobot policy's prefix goes to its own guidance or blending)."""
    return policy.cfg.max_delay if isinstance(policy, FlowChunkPolicy) else None


def load_policy(path: str | Path, device: str = "cpu") -> ChunkPolicy:
    """A policy from a robotrl checkpoint directory (any architecture), or from a lerobot
    policy folder without robotrl's metadata (``save_pretrained``, a hub snapshot's layout, a
    ``lerobot-train`` checkpoint step)."""
    src = Path(path)
    if not src.is_dir():
        raise CheckpointError(f"{src}: no such checkpoint directory")
    if not (src / META_FILE).is_file() and lerobot_policy_dir(src) is not None:
        from robotrl.policy.lerobot import LerobotChunkPolicy

        folder: ChunkPolicy = LerobotChunkPolicy.load(src, device=resolve_device(device))
        return folder
    meta = read_meta(src)
    arch = meta["architecture"]
    device = resolve_device(device)
    if arch == FLOW_ARCHITECTURE:
        return FlowChunkPolicy.load(src, device)
    if arch == LEROBOT_ARCHITECTURE:
        from robotrl.policy.lerobot import LerobotChunkPolicy

        adapter: ChunkPolicy = LerobotChunkPolicy.load(src, device=device)
        return adapter
    raise CheckpointError(f"{src / META_FILE}: unknown architecture {arch!r}")


def save_policy(policy: Any, path: str | Path) -> None:
    """Write ``policy`` as a checkpoint directory that :func:`load_policy` reads."""
    save = getattr(policy, "save", None)
    if save is None:
        raise TypeError(f"{type(policy).__name__} cannot be saved as a robotrl checkpoint")
    save(path)
