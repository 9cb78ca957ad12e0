"""The two weight slots: a load never blocks an inference, a swap never sees half an update."""

from __future__ import annotations

import threading
import time
import weakref

import numpy as np
import torch
from doubles import LinearChunkPolicy, TickPolicy
from waiting import wait_until

from robotrl.actor.slots import PolicySlots, spare_of
from robotrl.core.types import WeightUpdate
from robotrl.policy.weights import load_parameters
from robotrl.transport.hotswap import module_tensors


class GatedLoadPolicy(TickPolicy):
    """A policy whose weight load holds until the test opens the gate (a 200 MB copy, slowed down)."""

    def __init__(self) -> None:
        super().__init__(horizon=4)
        self.loading = threading.Event()
        self.gate = threading.Event()

    def load_weights(self, tensors, *, zero_copy=False):
        self.loading.set()
        assert self.gate.wait(10)
        super().load_weights(tensors, zero_copy=zero_copy)


def bias_update(version: int, value: float) -> WeightUpdate:
    return WeightUpdate.build(version, {"bias": np.array([value], np.float32)}, subset="trainable")


def test_a_swap_during_a_load_does_not_wait_and_finds_nothing_to_swap():
    spare = GatedLoadPolicy()
    slots = PolicySlots(TickPolicy(horizon=4), spare, policy_version=1)
    loader = threading.Thread(target=slots.stage, args=(bias_update(2, 0.5),))
    loader.start()
    assert spare.loading.wait(10)
    assert slots.swap_if_staged() is False  # returns at once although the load is under way
    assert slots.policy_version == 1 and slots.newest_version == 1
    spare.gate.set()
    loader.join(10)
    assert slots.newest_version == 2 and slots.policy_version == 1
    assert slots.swap_if_staged() is True
    assert slots.policy_version == 2 and float(slots.active.trainable_tensors()["bias"][0]) == 0.5


def test_stale_and_misshapen_updates_are_refused_and_counted():
    slots = PolicySlots(TickPolicy(horizon=4), TickPolicy(horizon=4), policy_version=3)
    assert slots.stage(bias_update(3, 0.5)) is False
    bad = WeightUpdate.build(4, {"bias": np.zeros(2, np.float32)}, subset="trainable")
    assert slots.stage(bad) is False
    assert slots.refused == {"stale_version": 1, "layout": 1}
    assert slots.swap_if_staged() is False and slots.policy_version == 3


def test_a_newer_update_replaces_a_staged_one_before_the_swap():
    slots = PolicySlots(TickPolicy(horizon=4), TickPolicy(horizon=4))
    assert slots.stage(bias_update(1, 0.25)) and slots.stage(bias_update(2, 0.75))
    assert slots.newest_version == 2
    assert slots.swap_if_staged() and slots.policy_version == 2
    assert float(slots.active.trainable_tensors()["bias"][0]) == 0.75


def test_zero_copy_slots_use_the_update_arrays_themselves():
    active, spare = LinearChunkPolicy(4, 2), LinearChunkPolicy(4, 2)
    slots = PolicySlots(active, spare, zero_copy=True)
    tensors = {name: np.full(t.shape, 0.5, np.float32) for name, t in spare.trainable_tensors().items()}
    assert slots.stage(WeightUpdate.build(1, tensors))
    slots.swap_if_staged()
    weight = dict(slots.active.net.named_parameters())["weight"]
    assert np.shares_memory(weight.detach().numpy(), tensors["weight"])
    assert weight.requires_grad and isinstance(weight, torch.nn.Parameter)
    copied = PolicySlots(LinearChunkPolicy(4, 2), LinearChunkPolicy(4, 2))
    assert copied.stage(WeightUpdate.build(1, tensors)) and copied.swap_if_staged()
    own = dict(copied.active.net.named_parameters())["weight"].detach().numpy()
    assert not np.shares_memory(own, tensors["weight"]) and np.all(own == 0.5)


def test_the_loader_thread_and_the_inference_thread_never_mix_versions():
    slots = PolicySlots(TickPolicy(horizon=4), TickPolicy(horizon=4))
    done = threading.Event()

    def load() -> None:
        for v in range(1, 200):
            slots.stage(bias_update(v, float(v)))
        done.set()

    threading.Thread(target=load, daemon=True).start()
    seen = []
    deadline = time.monotonic() + 30
    while not done.is_set() and time.monotonic() < deadline:
        slots.swap_if_staged()
        seen.append((slots.policy_version, float(slots.active.trainable_tensors()["bias"][0])))
    assert done.is_set()
    assert all(float(v) == b or v == 0 for v, b in seen)  # the active weights are always its version's
    assert [v for v, _ in seen] == sorted(v for v, _ in seen)


class FrozenBackbonePolicy(torch.nn.Module):
    """A VLA in miniature: a frozen backbone, a trainable head; updates ship the head only."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = torch.nn.Linear(4, 4).requires_grad_(False)
        self.head = torch.nn.Linear(4, 2)

    def trainable_tensors(self) -> dict[str, np.ndarray]:
        return module_tensors(self, trainable_only=True)

    def load_weights(self, tensors, *, zero_copy=False) -> None:
        load_parameters(self, tensors, zero_copy=zero_copy)


def test_the_spare_shares_the_frozen_backbone_and_a_full_update_never_writes_it():
    active = FrozenBackbonePolicy()
    slots = PolicySlots(active, spare_of(active))
    assert slots.active.backbone.weight is active.backbone.weight  # one backbone in memory
    spare = slots._spare
    assert spare.backbone.weight is active.backbone.weight and spare.head.weight is not active.head.weight
    backbone = active.backbone.weight.detach().clone()
    full = {name: np.full(t.shape, 7.0, np.float32) for name, t in module_tensors(active).items()}
    assert slots.stage(WeightUpdate.build(1, full, subset="full"))
    assert torch.equal(active.backbone.weight, backbone)  # the running policy's backbone untouched
    assert torch.all(active.head.weight != 7.0) and torch.all(spare.head.weight == 7.0)
    assert slots.swap_if_staged() and slots.active is spare


def test_the_weights_an_update_replaces_are_freed_off_the_loading_thread():
    active = FrozenBackbonePolicy()
    slots = PolicySlots(active, spare_of(active), zero_copy=True)
    head = {name: np.full(t.shape, 1.0, np.float32) for name, t in active.trainable_tensors().items()}
    assert slots.stage(WeightUpdate.build(1, head, subset="trainable"))
    first = weakref.ref(head["head.weight"])
    del head
    newer = {name: np.full(t.shape, 2.0, np.float32) for name, t in active.trainable_tensors().items()}
    loader = threading.get_ident()
    freed_on: list[int] = []
    weakref.finalize(first(), lambda: freed_on.append(threading.get_ident()))
    assert slots.stage(WeightUpdate.build(2, newer, subset="trainable"))  # replaces version 1 in the spare
    wait_until(lambda: first() is None, 10, "version 1's weights to be freed")
    assert freed_on and freed_on[0] != loader
    assert slots.swap_if_staged() and torch.all(slots.active.head.weight == 2.0)
