"""The critic's networks: chunk-level Q(s, a_{t:t+H}) and V(s), small LayerNorm MLPs.

The observation encoder reads the state and, optionally, every camera through a
small strided CNN (pooled to a few features per camera), so the critic can see an
object the state does not report. The executed chunk enters flattened, with its
padding mask, so a short chunk at an episode's end is not confused with zeros.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from robotrl.core.types import ACTION_KEY, ACTION_MASK_KEY, IMAGE_KEY_PREFIX, STATE_KEY


def mlp(inp: int, hidden: int, out: int, layers: int = 2) -> nn.Sequential:
    mods: list[nn.Module] = []
    width = inp
    for _ in range(layers):
        mods += [nn.Linear(width, hidden), nn.LayerNorm(hidden), nn.ReLU()]
        width = hidden
    mods.append(nn.Linear(width, out))
    return nn.Sequential(*mods)


class ObsEncoder(nn.Module):
    """State (+ pooled CNN features per camera) to one feature vector."""

    def __init__(self, state_dim: int, cameras: Sequence[str], image_features: int = 32) -> None:
        super().__init__()
        self.cameras = list(cameras)
        self.convs = nn.ModuleDict(
            {
                cam: nn.Sequential(
                    nn.Conv2d(3, 16, 5, stride=3, padding=2),
                    nn.ReLU(),
                    nn.Conv2d(16, 32, 3, stride=2, padding=1),
                    nn.ReLU(),
                    nn.Conv2d(32, image_features, 3, stride=2, padding=1),
                    nn.AdaptiveAvgPool2d(1),
                    nn.Flatten(),
                )
                for cam in self.cameras
            }
        )
        self.out_dim = state_dim + image_features * len(self.cameras)

    def forward(self, obs: Mapping[str, Any], prefix: str = "") -> torch.Tensor:
        parts = [obs[prefix + STATE_KEY].float()]
        for cam in self.cameras:
            img = obs[prefix + IMAGE_KEY_PREFIX + cam].permute(0, 3, 1, 2).float() / 255.0
            parts.append(self.convs[cam](img))
        return torch.cat(parts, dim=-1)


class TwinQ(nn.Module):
    """Two chunk-level Q networks over a shared observation encoder."""

    def __init__(
        self, state_dim: int, cameras: Sequence[str], horizon: int, action_dim: int, hidden: int
    ) -> None:
        super().__init__()
        self.encoder = ObsEncoder(state_dim, cameras)
        inp = self.encoder.out_dim + horizon * action_dim + horizon
        self.q1 = mlp(inp, hidden, 1)
        self.q2 = mlp(inp, hidden, 1)

    def forward(self, batch: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        mask = batch[ACTION_MASK_KEY].float()
        chunk = (batch[ACTION_KEY].float() * mask[..., None]).flatten(1)
        x = torch.cat([self.encoder(batch), chunk, mask], dim=-1)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)


class ValueNet(nn.Module):
    """V(s); ``prefix`` reads the next observation's keys (``next.``) of a batch."""

    def __init__(self, state_dim: int, cameras: Sequence[str], hidden: int) -> None:
        super().__init__()
        self.encoder = ObsEncoder(state_dim, cameras)
        self.v = mlp(self.encoder.out_dim, hidden, 1)

    def forward(self, batch: Mapping[str, Any], prefix: str = "") -> torch.Tensor:
        value: torch.Tensor = self.v(self.encoder(batch, prefix)).squeeze(-1)
        return value
