"""Weights between a torch module and the weight channel.

Learner side: :func:`module_tensors` gives the numpy views to publish (all of the
state, or only the trainable parameters). Actor side: :func:`expected_layout`
tells a :class:`~robotrl.transport.weights.WeightSubscriber` what to accept, and
:func:`install` puts a verified update into a module (a policy's ``load_weights``
can use it). The two-slot hot swap itself is the inference worker's
(:class:`robotrl.actor.slots.PolicySlots`, between two inferences).
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from robotrl.core.types import WeightUpdate
from robotrl.transport.weights import Layout, WeightRefused

log = logging.getLogger(__name__)


def module_tensors(module: torch.nn.Module, trainable_only: bool = False) -> dict[str, npt.NDArray[Any]]:
    """Numpy views (CPU) of ``module``'s state, or of its trainable parameters only.

    Views share memory with CPU tensors: publish them with ``copy=True`` (the default).
    """
    if trainable_only:
        items = [(n, t) for n, t in module.named_parameters() if t.requires_grad]
    else:
        items = list(module.state_dict().items())
    return {n: t.detach().cpu().numpy() for n, t in items}


def expected_layout(module: torch.nn.Module) -> Layout:
    """Every state tensor's shape and numpy dtype: what the module can accept."""
    return {
        n: (tuple(t.shape), np.dtype(str(t.dtype).removeprefix("torch.")))
        for n, t in module.state_dict().items()
    }


def install(module: torch.nn.Module, update: WeightUpdate, *, zero_copy: bool = False) -> None:
    """Put ``update`` into ``module``; raise WeightRefused on a name or shape mismatch.

    ``zero_copy`` makes a CPU module's tensors views of the update's arrays (for a
    verified update nobody will write to: the wire buffers stay alive as long as the
    module uses them) instead of copying 200 MB into the old ones; tensors on a GPU
    are always copied in place.
    """
    state = module.state_dict()
    for name, arr in update.tensors.items():
        target = state.get(name)
        if target is None:
            raise WeightRefused("names", f"module has no tensor {name!r}")
        if tuple(target.shape) != tuple(arr.shape):
            raise WeightRefused("shape", f"{name!r} is {tuple(arr.shape)}, module has {tuple(target.shape)}")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # from_numpy of a read-only wire view: only read
        tensors = {name: torch.from_numpy(np.asarray(arr)) for name, arr in update.tensors.items()}
        on_cpu = {n: t for n, t in tensors.items() if zero_copy and state[n].device.type == "cpu"}
        if on_cpu:
            module.load_state_dict(on_cpu, strict=False, assign=True)
        for name, tensor in tensors.items():
            if name not in on_cpu:  # a module on a GPU: one host-to-device copy
                state[name].copy_(tensor)
