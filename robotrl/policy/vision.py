"""The image encoder the flow policy and RAPI's critic share: a small CNN read out by
spatial-softmax keypoints (where things are) and mean features (what is there).

Why keypoints: a 64x64 camera shows the pick-and-place cube as a blob of a few pixels, and
the policy must place the gripper on it to a centimetre. A CNN pooled to a 2x2 grid kept
the cube's presence but not its position (the pixel demo's first policy never touched the
cube: docs/results.md). A spatial softmax turns each feature map into the expected image
coordinates of its activation, a sub-pixel position the layers after it read directly; it is
the read-out robomimic and Diffusion Policy use for manipulation from pixels (Levine et al.
2016, "End-to-end training of deep visuomotor policies").
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class SpatialSoftmax(nn.Module):
    """(B, C, H, W) feature maps -> (B, C, 2): each channel's softmax-weighted mean (x, y) in
    [-1, 1], with a learned temperature.

    Each map is standardised over its positions first, so a peak is sharp whatever the map's
    scale. Without that, the small activations of a freshly initialised CNN gave a near-uniform
    softmax whose keypoints sat at the image centre for every image, and its weak gradient left
    them there: after 4,000 pretraining steps the logits still varied by 0.03 over the image.
    """

    def __init__(self) -> None:
        super().__init__()
        self.log_temperature = nn.Parameter(torch.zeros(1))

    def forward(self, features: Tensor) -> Tensor:
        h, w = features.shape[-2:]
        ys = torch.linspace(-1.0, 1.0, h, device=features.device, dtype=features.dtype)
        xs = torch.linspace(-1.0, 1.0, w, device=features.device, dtype=features.dtype)
        grid = torch.stack(torch.meshgrid(xs, ys, indexing="xy"), dim=-1).reshape(h * w, 2)
        logits = features.flatten(2)
        logits = (logits - logits.mean(-1, keepdim=True)) / (logits.std(-1, keepdim=True) + 1e-5)
        attention = torch.softmax(logits / self.log_temperature.exp(), dim=-1)
        keypoints: Tensor = attention @ grid
        return keypoints


class KeypointEncoder(nn.Module):
    """uint8 (B, H, W, 3) -> (B, ``out``) features; any resolution.

    ``channels`` (c1, c2, c3, k): a stride-4 patchify to c1 maps (the full-resolution layer is
    the costly one), two 3x3 layers at that quarter resolution (c2, c3), then k keypoints and
    the c3 mean features, projected to ``out``.
    """

    def __init__(self, channels: tuple[int, int, int, int], out: int) -> None:
        super().__init__()
        c1, c2, c3, k = channels
        self.features = nn.Sequential(
            nn.Conv2d(3, c1, 4, stride=4),
            nn.GELU(),
            nn.Conv2d(c1, c2, 3, padding=1),
            nn.GELU(),
            nn.Conv2d(c2, c3, 3, padding=1),
            nn.GELU(),
        )
        self.keypoint_maps = nn.Conv2d(c3, k, 1)
        self.keypoints = SpatialSoftmax()
        self.proj = nn.Linear(2 * k + c3, out)

    def forward(self, images: Tensor) -> Tensor:
        x = images.permute(0, 3, 1, 2).float().mul_(2.0 / 255.0).sub_(1.0)
        maps = self.features(x)
        where = self.keypoints(self.keypoint_maps(maps)).flatten(1)
        what = maps.mean(dim=(2, 3))
        out: Tensor = self.proj(torch.cat([where, what], dim=1))
        return out
