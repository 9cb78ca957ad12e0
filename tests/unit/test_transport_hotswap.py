"""Installing weights into a torch module: zero-copy views or in-place copies, refusals before writes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robotrl.core.types import WeightUpdate
from robotrl.policy.weights import load_parameters
from robotrl.transport.hotswap import expected_layout, install, module_tensors
from robotrl.transport.weight_checks import WeightRefused


def test_zero_copy_install_makes_the_module_use_the_received_buffers():
    module = torch.nn.Linear(4, 3)
    weight = np.arange(12, dtype=np.float32).reshape(3, 4)
    weight.flags.writeable = False  # as the wire decoder hands them out
    install(module, WeightUpdate.build(1, {"weight": weight}, "trainable"), zero_copy=True)
    assert module.weight.data_ptr() == weight.ctypes.data
    assert module.weight.requires_grad  # a parameter stays a trainable parameter


def test_copy_install_keeps_the_module_memory():
    module = torch.nn.Linear(4, 3)
    before = module.weight.data_ptr()
    install(module, WeightUpdate.build(1, {"weight": np.ones((3, 4), np.float32)}, "trainable"))
    assert module.weight.data_ptr() == before and torch.equal(module.weight, torch.ones(3, 4))


def test_a_mismatched_update_is_refused_before_anything_is_written():
    module = torch.nn.Linear(4, 3)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    bad = {"bias": np.zeros(3, np.float32), "weight": np.zeros((4, 3), np.float32)}
    with pytest.raises(WeightRefused, match="shape"):
        install(module, WeightUpdate.build(1, bad), zero_copy=True)
    assert all(torch.equal(before[k], v) for k, v in module.state_dict().items())


def test_layout_and_trainable_subset_come_from_the_module():
    module = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.LayerNorm(2))
    module[0].requires_grad_(False)
    assert expected_layout(module)["0.weight"] == ((2, 2), np.dtype(np.float32))
    assert sorted(module_tensors(module, trainable_only=True)) == ["1.bias", "1.weight"]


def test_zero_copy_keeps_tied_weights_tied():
    module = torch.nn.Sequential(torch.nn.Linear(3, 3, bias=False), torch.nn.Linear(3, 3, bias=False))
    module[1].weight = module[0].weight  # tied, as an embedding and its output layer
    new = np.full((3, 3), 2.0, np.float32)
    load_parameters(module, {"0.weight": new}, zero_copy=True)
    assert module[0].weight is module[1].weight
    assert torch.all(module[1].weight == 2.0)
    assert not np.shares_memory(module[0].weight.detach().numpy(), new)  # copied into, not replaced


def test_a_bfloat16_module_ships_and_takes_float32_exactly():
    module = torch.nn.Linear(4, 3).to(torch.bfloat16)
    shipped = module_tensors(module)
    assert shipped["weight"].dtype == np.float32 and expected_layout(module)["weight"][1] == np.float32
    new = (np.arange(12, dtype=np.float32).reshape(3, 4) / 4).copy()  # exact in bfloat16
    new.flags.writeable = False
    install(module, WeightUpdate.build(1, {"weight": new}, "trainable"), zero_copy=True)
    assert module.weight.dtype == torch.bfloat16 and torch.equal(module.weight.float(), torch.from_numpy(new))
    with pytest.raises(WeightRefused):
        install(module, WeightUpdate.build(2, {"weight": new.astype(np.float64)}, "trainable"))
