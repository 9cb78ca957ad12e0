"""Device choice, batch transfer and mixed precision: the only place the learner branches on CUDA."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch


def resolve_device(name: str) -> torch.device:
    """'auto' is CUDA when present, else the CPU; 'cuda' without a GPU is a clear error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"learner.device={name!r} but no CUDA device is present")
    return device


def to_torch(batch: Mapping[str, Any], device: torch.device) -> dict[str, Any]:
    """numpy arrays to tensors on ``device`` (through pinned memory on CUDA); lists pass through."""
    cuda = device.type == "cuda"
    out: dict[str, Any] = {}
    for key, value in batch.items():
        if isinstance(value, np.ndarray):
            tensor = torch.from_numpy(np.ascontiguousarray(value))
            if cuda:
                tensor = tensor.pin_memory().to(device, non_blocking=True)
            out[key] = tensor
        else:
            out[key] = value
    return out


@contextlib.contextmanager
def autocast(device: torch.device) -> Iterator[None]:
    """bf16 autocast on CUDA; full precision on the CPU (same code either way)."""
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        yield
