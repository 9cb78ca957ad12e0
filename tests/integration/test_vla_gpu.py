"""Tiny SmolVLA and pi0.5 on CUDA: a chunk with an exact RTC prefix, and the learner's policy step
under bf16 autocast with lerobot's gradient checkpointing (pi0.5), changing only trainable tensors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from test_policy_vla import A, H, chunk, spec, training_batch

from robotrl.config.learner import LearnerConfig
from robotrl.learner.bc import BehaviourCloning
from robotrl.policy.lerobot import LerobotChunkPolicy
from robotrl.policy.vla import MAKERS

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
CUDA = torch.device("cuda")


@pytest.fixture(scope="module", params=sorted(MAKERS))
def vla_dir(request, tmp_path_factory) -> Path:
    made: Path = MAKERS[request.param](tmp_path_factory.mktemp("vla") / request.param, "tiny", spec(), H)
    return made


def test_a_chunk_on_cuda_keeps_the_prefix_exact(vla_dir):
    policy = LerobotChunkPolicy.load(vla_dir, spec(), device="cuda")
    assert policy.device.type == "cuda" and policy.uses_rtc
    prefix = np.linspace(-50, 50, 4 * A, dtype=np.float32).reshape(4, A)
    guided = chunk(policy, prefix, 4)
    assert guided.shape == (H, A) and np.isfinite(guided).all()
    assert np.array_equal(guided[:4], prefix)


def test_the_learner_step_on_cuda_trains_only_the_expert_in_bf16(vla_dir):
    policy = LerobotChunkPolicy.load(vla_dir, spec())
    trainable = set(policy.trainable_tensors())
    trainer = BehaviourCloning(policy, LearnerConfig(device="cuda"), CUDA)
    assert policy.device.type == "cuda"
    if policy.config.type == "pi05":
        assert policy.policy.model.gradient_checkpointing_enabled
    before = {name: p.detach().clone() for name, p in policy.policy.named_parameters()}
    batch = {k: v.to(CUDA) if isinstance(v, torch.Tensor) else v for k, v in training_batch(policy).items()}
    losses = [trainer._policy_step(batch, None) for _ in range(3)]
    assert all(np.isfinite(losses)), losses
    changed = {n for n, p in policy.policy.named_parameters() if not torch.equal(before[n], p)}
    assert changed and changed <= trainable
