"""The ``policy`` group: which chunk policy runs, its size and its inference settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from robotrl.config.bounds import DEVICE, bounds


class PolicyKind(Enum):
    flow = "flow"  # robotrl's built-in flow-matching chunk policy
    lerobot = "lerobot"  # a lerobot pretrained policy through the adapter
    expert = "expert"  # the sim's scripted expert of the task (robotrl.sim.experts); record only


class PolicySize(Enum):
    tiny = "tiny"  # about 0.3M parameters, for tests and the latency sweep
    mini = "mini"  # about 1M, the CPU fine-tuning demo
    small = "small"  # about 10M, camera policies
    base = "base"  # 50-100M, for a GPU


@dataclass
class PolicyConfig:
    kind: PolicyKind = PolicyKind.flow
    """Built-in flow policy or a lerobot policy through the adapter."""
    size: PolicySize = PolicySize.small
    """Size preset of the built-in policy."""
    horizon: int = field(default=32, metadata=bounds(gt=0))
    """Actions per chunk (H)."""
    max_delay: int = field(default=12, metadata=bounds(ge=0))
    """Largest committed prefix (ticks) seen in training; prefix conditioning holds up to here.
    Below ``horizon``."""
    flow_steps: int = field(default=5, metadata=bounds(gt=0))
    """Integration steps of the flow-matching head at inference."""
    noise_scale: float = field(default=1.0, metadata=bounds(ge=0, le=2, note="1: sample as trained"))
    """Inference temperature of the flow policy: its integration starts from Gaussian noise times
    this. 1 samples the learned distribution; lower values pick likelier chunks (0: the same chunk
    for the same observation). Training is unaffected."""
    path: str | None = None
    """Local directory of pretrained weights (robotrl checkpoint or lerobot policy); None for fresh."""
    lora_rank: int = field(default=0, metadata=bounds(ge=0))
    """A lerobot VLA (``kind=lerobot``) only: 0 trains what the folder's config trains (SmolVLA's
    and pi0.5's action expert); r > 0 trains LoRA adapters of rank r (peft) instead, on the VLM's
    and the expert's attention query/value projections and the action projections, every base
    weight frozen. The actor and the learner must agree on it; a saved folder holds the merged
    weights."""
    device: str = field(default="auto", metadata=DEVICE)
    """'auto' (CUDA when present), 'cpu' or 'cuda'."""
