"""Weights between a torch module and the weight channel.

Learner side: :func:`module_tensors` gives the numpy views to publish (all of the
state, or only the trainable parameters). Actor side: :func:`expected_layout`
tells a :class:`~robotrl.transport.weight_subscriber.WeightSubscriber` what to accept,
and :func:`install` puts a verified update into a module with the policy's own loader
(:func:`robotrl.policy.weights.load_parameters`), counting a mismatch as a refusal.
The two-slot hot swap itself is the inference worker's
(:class:`robotrl.actor.slots.PolicySlots`, between two inferences).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy.typing as npt
import torch

from robotrl.core.types import WeightUpdate
from robotrl.policy.weights import load_parameters, wire_dtype, wire_torch_dtype
from robotrl.transport.weight_checks import Layout, WeightRefused

log = logging.getLogger(__name__)


def module_tensors(module: torch.nn.Module, trainable_only: bool = False) -> dict[str, npt.NDArray[Any]]:
    """Numpy views (CPU) of ``module``'s state, or of its trainable parameters only.

    Views share memory with CPU tensors (bfloat16 ones are widened copies: see
    :func:`wire_dtype`): publish them with ``copy=True`` (the default).
    """
    if trainable_only:
        items = [(n, t) for n, t in module.named_parameters() if t.requires_grad]
    else:
        items = list(module.state_dict().items())
    return {n: t.detach().cpu().to(wire_torch_dtype(t.dtype)).numpy() for n, t in items}


def expected_layout(module: torch.nn.Module) -> Layout:
    """Every state tensor's shape and numpy dtype: what the module can accept."""
    return {n: (tuple(t.shape), wire_dtype(t.dtype)) for n, t in module.state_dict().items()}


def install(module: torch.nn.Module, update: WeightUpdate, *, zero_copy: bool = False) -> None:
    """Put a verified ``update`` into ``module`` (see :func:`load_parameters`); a mismatch
    raises :class:`WeightRefused` with its countable reason."""
    try:
        load_parameters(module, update.tensors, zero_copy=zero_copy)
    except KeyError as exc:
        raise WeightRefused("names", str(exc.args[0])) from exc
    except ValueError as exc:
        raise WeightRefused("dtype" if "dtype" in str(exc) else "shape", str(exc)) from exc
