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
from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from robotrl.core.types import WeightUpdate
from robotrl.transport.weight_checks import Layout, WeightRefused

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


def load_parameters(
    module: torch.nn.Module,
    tensors: Mapping[str, npt.NDArray[Any]],
    *,
    zero_copy: bool = False,
    owner: str = "the module",
) -> None:
    """Put ``tensors`` into ``module``'s state; every name, shape and dtype is checked first.

    Raises KeyError (unknown name) or ValueError (shape, dtype) before anything changes.
    ``zero_copy`` makes a CPU module's tensors views of the arrays (for a verified update
    nobody will write to: the wire buffers stay alive as long as the module uses them)
    instead of copying 200 MB into the old ones; tensors on a GPU are always copied.
    """
    state = module.state_dict()
    for name, arr in tensors.items():
        target = state.get(name)
        if target is None:
            raise KeyError(f"{owner} has no tensor {name!r}")
        if tuple(target.shape) != tuple(arr.shape):
            raise ValueError(f"{name!r} has shape {tuple(arr.shape)}, {owner} has {tuple(target.shape)}")
        want = np.dtype(str(target.dtype).removeprefix("torch."))
        if arr.dtype != want:
            raise ValueError(f"{name!r} has dtype {arr.dtype}, {owner} has {want}")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # from_numpy of a read-only wire view: only read
        as_torch = {name: torch.from_numpy(np.asarray(arr)) for name, arr in tensors.items()}
        users = Counter(t.data_ptr() for t in state.values()) if zero_copy else Counter()
        shared = {  # a CPU tensor no other entry uses (tied weights stay tied: those are copied into)
            n: t
            for n, t in as_torch.items()
            if zero_copy and state[n].device.type == "cpu" and users[state[n].data_ptr()] == 1
        }
        if shared:
            module.load_state_dict(shared, strict=False, assign=True)
        for name, tensor in as_torch.items():
            if name not in shared:  # in place; on a GPU, one host-to-device copy
                state[name].copy_(tensor)


def install(module: torch.nn.Module, update: WeightUpdate, *, zero_copy: bool = False) -> None:
    """Put a verified ``update`` into ``module`` (see :func:`load_parameters`); a mismatch
    raises :class:`WeightRefused` with its countable reason."""
    try:
        load_parameters(module, update.tensors, zero_copy=zero_copy)
    except KeyError as exc:
        raise WeightRefused("names", str(exc.args[0])) from exc
    except ValueError as exc:
        raise WeightRefused("dtype" if "dtype" in str(exc) else "shape", str(exc)) from exc
