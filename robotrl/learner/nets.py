"""The critic's networks: chunk-level Q(s, a_{t:t+H}) and V(s), small LayerNorm MLPs.

The observation encoder reads the state and, optionally, every camera through a
small CNN read out by spatial-softmax keypoints, so the critic can see where an object
the state does not report is. The executed chunk enters flattened, with its
padding mask, so a short chunk at an episode's end is not confused with zeros.

State and actions are z-scored with the policy's statistics (:meth:`Critic.set_normalization`):
raw joint angles in degrees are a hundred to a thousand times larger than an object's
position in metres, and unscaled they drown the very features that tell success from failure.
A feature that was constant in the policy's training data (std below ``CONSTANT_STATE_STD``)
is held at 0, as the policy holds it: z-scored by a floored std, the first online deviation
there is thousands of sigmas and swamps every other input of Q and V.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from robotrl.core import keys
from robotrl.policy.flow import CONSTANT_STATE_STD
from robotrl.policy.vision import KeypointEncoder


def zscore(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """``(x - mean) / std`` per feature, 0 where the feature was constant (std < CONSTANT_STATE_STD)."""
    return torch.where(std >= CONSTANT_STATE_STD, (x.float() - mean) / std, 0.0)


def mlp(inp: int, hidden: int, out: int, layers: int = 2) -> nn.Sequential:
    mods: list[nn.Module] = []
    width = inp
    for _ in range(layers):
        mods += [nn.Linear(width, hidden), nn.LayerNorm(hidden), nn.ReLU()]
        width = hidden
    mods.append(nn.Linear(width, out))
    return nn.Sequential(*mods)


class ObsEncoder(nn.Module):
    """State (+ keypoint features per camera, :class:`KeypointEncoder`) to one feature vector.

    Images above 64 pixels are subsampled by 2 first: the critic needs where things are, not
    fine texture, and a full frame has four times the pixels to convolve.
    """

    state_mean: torch.Tensor
    state_std: torch.Tensor

    def __init__(
        self, state_dim: int, cameras: Mapping[str, tuple[int, int, int]], image_features: int = 32
    ) -> None:
        super().__init__()
        self.cameras = list(cameras)
        self.convs = nn.ModuleDict(
            {cam: KeypointEncoder((16, 32, 32, 16), image_features) for cam in self.cameras}
        )
        self.steps = {cam: 2 if min(shape[:2]) > 64 else 1 for cam, shape in cameras.items()}
        self.out_dim = state_dim + image_features * len(self.cameras)
        self.register_buffer("state_mean", torch.zeros(state_dim))
        self.register_buffer("state_std", torch.ones(state_dim))

    def forward(self, obs: Mapping[str, Any], prefix: str = "") -> torch.Tensor:
        parts = [zscore(obs[prefix + keys.STATE], self.state_mean, self.state_std)]
        for cam in self.cameras:
            step = self.steps[cam]  # subsampled while still uint8: a quarter of the bytes to convert
            parts.append(self.convs[cam](obs[prefix + keys.IMAGE_PREFIX + cam][:, ::step, ::step]))
        return torch.cat(parts, dim=-1)


class Critic(nn.Module):
    """Two chunk-level Q heads and a V head over one shared observation encoder.

    Sharing the encoder means one image pass per batch for all three values; V's
    input is the observation alone, Q's adds the flattened executed chunk and its mask.
    """

    action_mean: torch.Tensor
    action_std: torch.Tensor

    def __init__(
        self,
        state_dim: int,
        cameras: Mapping[str, tuple[int, int, int]],
        horizon: int,
        action_dim: int,
        hidden: int,
    ) -> None:
        super().__init__()
        self.encoder = ObsEncoder(state_dim, cameras)
        q_in = self.encoder.out_dim + horizon * action_dim + horizon
        self.q1 = mlp(q_in, hidden, 1)
        self.q2 = mlp(q_in, hidden, 1)
        self.v = mlp(self.encoder.out_dim, hidden, 1)
        self.register_buffer("action_mean", torch.zeros(action_dim))
        self.register_buffer("action_std", torch.ones(action_dim))

    def set_normalization(self, stats: Mapping[str, Any]) -> None:
        """Z-score inputs with ``state_mean``/``state_std``/``action_mean``/``action_std`` (the policy's)."""
        with torch.no_grad():
            for module, names in (
                (self.encoder, ("state_mean", "state_std")),
                (self, ("action_mean", "action_std")),
            ):
                for name in names:
                    buf = getattr(module, name)
                    value = torch.as_tensor(stats[name], dtype=buf.dtype).reshape(buf.shape)
                    buf.copy_(value.clamp_min(1e-3) if name.endswith("_std") else value)

    def q(self, features: torch.Tensor, batch: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        mask = batch[keys.ACTION_MASK].float()
        actions = zscore(batch[keys.ACTION], self.action_mean, self.action_std)
        chunk = (actions * mask[..., None]).flatten(1)
        x = torch.cat([features, chunk, mask], dim=-1)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)

    def value(self, features: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.v(features).squeeze(-1)
        return out

    def forward(self, batch: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(Q1, Q2, V) of the batch's observation and executed chunk."""
        feat = self.encoder(batch)
        q1, q2 = self.q(feat, batch)
        return q1, q2, self.value(feat)
