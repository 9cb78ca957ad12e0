"""Random-shift augmentation of camera images for training, as DrQ does (Kostrikov et al. 2020).

A pixel policy trained on a few dozen demonstrations overfits to exact pixel positions; shifting
every training image by a few pixels (pad by replication, crop back at a random offset) is the
augmentation HIL-SERL, SERL and RLPD's pixel agents train with. It runs on training batches only,
in pretraining and in the learner, on uint8 images as they arrive (no float copy); inference never
calls it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from robotrl.core import keys


def random_shift(images: Tensor, pad: int, generator: torch.Generator | None = None) -> Tensor:
    """``images`` (B, H, W, C), each shifted by its own integer offset in [-pad, pad] on both axes;
    the border is the edge pixels repeated (DrQ's replicate padding). Same dtype and shape."""
    if pad <= 0 or images.numel() == 0:
        return images
    b, h, w, _ = images.shape
    # Clamped indices are replicate padding, done by indexing so uint8 stays uint8.
    rows = torch.arange(h, device=images.device)
    cols = torch.arange(w, device=images.device)
    offsets = torch.randint(0, 2 * pad + 1, (2, b), generator=generator, device="cpu").to(images.device)
    row_idx = (rows[None, :] + offsets[0][:, None] - pad).clamp_(0, h - 1)  # (B, H)
    col_idx = (cols[None, :] + offsets[1][:, None] - pad).clamp_(0, w - 1)  # (B, W)
    batch_idx = torch.arange(b, device=images.device)[:, None, None]
    return images[batch_idx, row_idx[:, :, None], col_idx[:, None, :]]


def shift_batch_images(
    batch: Mapping[str, Any], pad: int, generator: torch.Generator | None = None
) -> dict[str, Any]:
    """``batch`` with every camera tensor (any key holding ``observation.images.``, the next
    observation's too) shifted by :func:`random_shift`, each sample and camera independently."""
    out = dict(batch)
    if pad <= 0:
        return out
    for key, value in batch.items():
        if keys.IMAGE_PREFIX in key and isinstance(value, Tensor) and value.dim() == 4:
            out[key] = random_shift(value, pad, generator)
    return out
