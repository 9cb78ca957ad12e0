"""Training from pixels: DrQ's random shift (a crop of the edge-padded image, on every camera of a
training batch, in the learner's batches and never at inference), and image-encoder updates that
reach the actor by hot-swap."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from test_policy_flow import CAMS, make_policy, observation_of, synthetic_batch
from torch.nn import functional

from robotrl.config.learner import LearnerConfig
from robotrl.core import keys
from robotrl.core.types import WeightUpdate
from robotrl.learner.bc import BehaviourCloning
from robotrl.policy.augment import random_shift, shift_batch_images
from robotrl.transport.hotswap import install

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def random_images(b: int, h: int, w: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (b, h, w, 3), generator=g, dtype=torch.uint8)


def test_each_shifted_image_is_a_crop_of_the_edge_padded_image_at_its_own_offset():
    pad, images = 2, random_images(32, 10, 12)
    out = random_shift(images, pad, torch.Generator().manual_seed(1))
    assert out.dtype == torch.uint8 and out.shape == images.shape
    padded = functional.pad(images.permute(0, 3, 1, 2).float(), (pad,) * 4, mode="replicate")
    padded = padded.permute(0, 2, 3, 1)
    offsets = set()
    for i in range(len(images)):
        found = [
            (dy, dx)
            for dy in range(2 * pad + 1)
            for dx in range(2 * pad + 1)
            if torch.equal(out[i].float(), padded[i, dy : dy + 10, dx : dx + 12])
        ]
        assert found, f"image {i} is no crop of its padded self"
        offsets.update(found)
    assert len(offsets) > 5, "every sample should draw its own offset"


def test_no_pad_leaves_the_images_as_they_are():
    images = random_images(4, 8, 8)
    assert random_shift(images, 0) is images
    batch = {keys.IMAGE_PREFIX + "front": images}
    assert shift_batch_images(batch, 0)[keys.IMAGE_PREFIX + "front"] is images


def test_a_batch_shifts_every_camera_and_the_next_observations_and_nothing_else():
    state = torch.randn(8, 5)
    batch = {
        keys.STATE: state,
        keys.IMAGE_PREFIX + "front": random_images(8, 16, 16, 1),
        keys.IMAGE_PREFIX + "wrist": random_images(8, 16, 16, 2),
        "next." + keys.IMAGE_PREFIX + "front": random_images(8, 16, 16, 3),
        keys.TASK: ["pick"] * 8,
    }
    out = shift_batch_images(batch, 3, torch.Generator().manual_seed(0))
    for key in batch:
        if keys.IMAGE_PREFIX in key:
            assert out[key].shape == batch[key].shape and not torch.equal(out[key], batch[key]), key
    assert out[keys.STATE] is state and out[keys.TASK] == batch[keys.TASK]


def as_tensors(batch: dict) -> dict:
    return {k: torch.as_tensor(v) if isinstance(v, np.ndarray) else v for k, v in batch.items()}


def encoder_inputs(policy: torch.nn.Module) -> list[torch.Tensor]:
    """Every image batch the policy's image encoder is given, as it was given."""
    seen: list[torch.Tensor] = []
    policy.image_encoder.register_forward_pre_hook(lambda _m, args: seen.append(args[0].clone()))
    return seen


def test_the_learner_trains_on_shifted_images_and_inference_reads_them_as_recorded():
    policy = make_policy()
    seen = encoder_inputs(policy)
    batch = {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in synthetic_batch(16).items()}
    recorded = torch.cat([torch.from_numpy(batch[keys.IMAGE_PREFIX + c]) for c in CAMS])

    BehaviourCloning(
        policy, LearnerConfig(actor_updates_per_group=1, image_shift=0), torch.device("cpu")
    ).update_group(lambda: batch)
    assert torch.equal(seen[-1], recorded), "image_shift=0 trains on the images as sampled"

    BehaviourCloning(
        policy, LearnerConfig(actor_updates_per_group=1, image_shift=4), torch.device("cpu")
    ).update_group(lambda: batch)
    assert seen[-1].shape == recorded.shape and not torch.equal(seen[-1], recorded)

    policy.eval()
    obs = observation_of(
        {k: torch.as_tensor(v) if isinstance(v, np.ndarray) else v for k, v in batch.items()}, 0
    )
    policy.infer(obs, None, 0)
    assert torch.equal(seen[-1], torch.cat([torch.from_numpy(obs.images[c])[None] for c in CAMS]))


def test_an_update_moves_the_image_encoder_and_the_actor_gets_it_by_hot_swap():
    policy = make_policy()
    actor_side = copy.deepcopy(policy)  # the actor's spare slot, at the pretrained weights
    before = {k: v.clone() for k, v in policy.image_encoder.state_dict().items()}
    batch = {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in synthetic_batch(16).items()}
    trainer = BehaviourCloning(policy, LearnerConfig(actor_updates_per_group=3), torch.device("cpu"))
    trainer.update_group(lambda: batch)
    moved = [k for k, v in policy.image_encoder.state_dict().items() if not torch.equal(v, before[k])]
    assert moved, "no image encoder weight moved"

    published = trainer.policy_weights()
    assert {f"image_encoder.{k}" for k in moved} <= set(published)
    install(actor_side, WeightUpdate.build(1, published, "trainable"))
    for k, v in policy.image_encoder.state_dict().items():
        assert torch.equal(actor_side.image_encoder.state_dict()[k], v), k
    policy.eval()
    obs = observation_of(
        {k: torch.as_tensor(v) if isinstance(v, np.ndarray) else v for k, v in batch.items()}, 1
    )
    noise = np.random.default_rng(0).standard_normal((policy.horizon, policy.action_dim)).astype(np.float32)
    np.testing.assert_array_equal(policy.infer(obs, None, 0, noise), actor_side.infer(obs, None, 0, noise))
