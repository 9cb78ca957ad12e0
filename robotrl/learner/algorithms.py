"""Which :class:`~robotrl.core.protocols.Algorithm` ``learner.algorithm`` names.

A new algorithm is one more entry here; the loop never changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from robotrl.config.learner import AlgorithmKind, LearnerConfig
from robotrl.core.protocols import Algorithm
from robotrl.learner.bc import BehaviourCloning
from robotrl.learner.distributed import SINGLE, Ranks
from robotrl.learner.rapi import RAPI

Cameras = Mapping[str, tuple[int, int, int]]
Factory = Callable[[Any, LearnerConfig, torch.device, int, Cameras, Ranks], Algorithm]

ALGORITHMS: dict[AlgorithmKind, Factory] = {
    AlgorithmKind.rapi: lambda policy, cfg, device, state_dim, cams, ranks: RAPI(
        policy, cfg, device, state_dim, cams, ranks
    ),
    AlgorithmKind.bc: lambda policy, cfg, device, state_dim, cams, ranks: BehaviourCloning(
        policy, cfg, device, ranks
    ),
}


def build_algorithm(
    cfg: LearnerConfig,
    policy: Any,
    device: torch.device,
    state_dim: int,
    cameras: Cameras,
    ranks: Ranks = SINGLE,
) -> Algorithm:
    """The configured algorithm, training on ``ranks`` (DDP over several)."""
    return ALGORITHMS[cfg.algorithm](policy, cfg, device, state_dim, cameras, ranks)
