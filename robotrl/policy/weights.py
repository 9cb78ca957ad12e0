"""Loading tensors into a policy's torch module: every name, shape and dtype checked first.

A policy's ``load_weights`` uses this for its own weights (a checkpoint, an update
from the learner); the weight link's :mod:`robotrl.transport.hotswap` uses it too, so
the policy side never depends on the transport.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import torch


def load_parameters(
    module: torch.nn.Module,
    tensors: Mapping[str, npt.NDArray[Any]],
    *,
    zero_copy: bool = False,
    owner: str = "the module",
) -> None:
    """Put ``tensors`` into ``module``'s state; every name, shape and dtype is checked first.

    Raises KeyError (unknown name) or ValueError (shape, dtype) before anything changes.
    ``zero_copy`` makes a CPU module's parameters views of the arrays (for a verified update
    nobody will write to: the wire buffers or shared memory stay alive as long as the module
    uses them) instead of copying 200 MB into the old ones; buffers, which a module may
    update in place, and tensors on a GPU are always copied.
    """
    state = module.state_dict()
    for name, arr in tensors.items():
        target = state.get(name)
        if target is None:
            raise KeyError(f"{owner} has no tensor {name!r}")
        if tuple(target.shape) != tuple(arr.shape):
            raise ValueError(f"{name!r} has shape {tuple(arr.shape)}, {owner} has {tuple(target.shape)}")
        want = wire_dtype(target.dtype)
        if arr.dtype != want:
            raise ValueError(f"{name!r} has dtype {arr.dtype}, {owner} has {want}")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # from_numpy of a read-only wire view: only read
        as_torch = {name: torch.from_numpy(np.asarray(arr)) for name, arr in tensors.items()}
        users = Counter(t.data_ptr() for t in state.values()) if zero_copy else Counter()
        parameters = dict(module.named_parameters()) if zero_copy else {}
        shared = {  # a CPU parameter no other entry uses (tied weights stay tied: those are copied
            n: t  # into), never a buffer, which a module may update in place (BatchNorm's statistics)
            for n, t in as_torch.items()
            if n in parameters
            and state[n].device.type == "cpu"
            and state[n].dtype == t.dtype
            and users[state[n].data_ptr()] == 1
        }
        if shared:
            module.load_state_dict(shared, strict=False, assign=True)
        for name, tensor in as_torch.items():
            if name not in shared:  # in place (cast where narrower); on a GPU, one host-to-device copy
                state[name].copy_(tensor)


def wire_torch_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a tensor of ``dtype`` travels and is stored as: its own, except bfloat16, which
    numpy lacks, as float32 (exact; cast back on install)."""
    return torch.float32 if dtype == torch.bfloat16 else dtype


def wire_dtype(dtype: torch.dtype) -> np.dtype[Any]:
    """:func:`wire_torch_dtype` as numpy's dtype."""
    return np.dtype(str(wire_torch_dtype(dtype)).removeprefix("torch."))
