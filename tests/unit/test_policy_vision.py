"""The shared image encoder: keypoints that say where a feature is, any resolution, mixed cameras."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robotrl.config.policy import PolicyConfig, PolicySize
from robotrl.core.types import EnvSpec, Observation
from robotrl.policy.flow import FlowChunkPolicy
from robotrl.policy.vision import KeypointEncoder, SpatialSoftmax

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize(("row", "col"), [(0, 0), (3, 12), (15, 7)])
def test_a_sharp_peak_s_keypoint_is_its_position_in_the_image(row, col):
    maps = torch.zeros(1, 1, 16, 16)
    maps[0, 0, row, col] = 50.0  # a peak far above the rest: softmax puts nearly all weight there
    x, y = SpatialSoftmax()(maps)[0, 0].tolist()
    assert x == pytest.approx(-1 + 2 * col / 15, abs=1e-3)
    assert y == pytest.approx(-1 + 2 * row / 15, abs=1e-3)


def test_the_encoder_reads_any_resolution_and_moves_with_the_object():
    torch.manual_seed(0)
    enc = KeypointEncoder((8, 8, 8, 4), 16)
    for size in (32, 64, 96):
        blank = torch.zeros(2, size, size, 3, dtype=torch.uint8)
        assert enc(blank).shape == (2, 16)
    left, right = torch.zeros(1, 64, 64, 3, dtype=torch.uint8), torch.zeros(1, 64, 64, 3, dtype=torch.uint8)
    left[0, 28:36, 4:12], right[0, 28:36, 52:60] = 255, 255  # the same square, moved across the image
    assert not torch.allclose(enc(left), enc(right), atol=1e-4)


def test_a_flow_policy_reads_cameras_of_different_shapes():
    spec = EnvSpec(
        name="mixed",
        action_names=("a0", "a1"),
        action_low=(-1.0, -1.0),
        action_high=(1.0, 1.0),
        state_names=("s0",),
        camera_shapes={"front": (96, 128, 3), "wrist": (64, 64, 3)},
        instruction="pick",
    )
    policy = FlowChunkPolicy(spec, PolicyConfig(size=PolicySize.tiny, horizon=8, max_delay=2, device="cpu"))
    rng = np.random.default_rng(0)
    images = {c: rng.integers(0, 256, s, dtype=np.uint8) for c, s in spec.camera_shapes.items()}
    chunk = policy.infer(Observation(0, np.zeros(1, np.float32), images, "pick"), None, 0)
    assert chunk.shape == (8, 2) and np.isfinite(chunk).all()
    # Each camera's image reaches the chunk: changing either one changes it.
    noise = np.zeros((8, 2), np.float32)
    base = policy.infer(Observation(0, np.zeros(1, np.float32), images, "pick"), None, 0, noise=noise)
    for cam in images:
        changed = dict(images, **{cam: 255 - images[cam]})
        other = policy.infer(Observation(0, np.zeros(1, np.float32), changed, "pick"), None, 0, noise=noise)
        assert not np.allclose(base, other), cam
