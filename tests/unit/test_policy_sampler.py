"""ChunkSampler's training options: the goal held after a success, state noise for training only."""

from __future__ import annotations

import numpy as np
import pytest

from robotrl.config.load import ConfigError, load_config
from robotrl.core import keys
from robotrl.core.types import EnvSpec
from robotrl.policy.data import ChunkSampler, Demos

H = 6


def demos(success: list[bool], length: int = 4) -> Demos:
    """Episodes of ``length`` frames; state row i is (i, 10 i), action row i is i in every joint."""
    n = len(success) * length
    state = np.stack([np.arange(n), 10 * np.arange(n)], axis=1).astype(np.float32)
    action = np.repeat(np.arange(n, dtype=np.float32)[:, None], 2, axis=1)
    bounds = [(e * length, (e + 1) * length) for e in range(len(success))]
    spec = EnvSpec(
        name="t",
        action_names=("a", "b"),
        action_low=(0.0, 0.0),
        action_high=(float(n), float(n)),
        state_names=("s", "v"),
        camera_shapes={},
        control_hz=30.0,
        max_episode_ticks=length,
        instruction="reach",
    )
    return Demos(state, action, {}, ["reach"] * n, bounds, spec, success)


def test_rows_past_a_successful_end_hold_the_last_action_only_when_asked():
    d = demos([True, False])
    idx, prefix = np.array([2, 6]), np.zeros(2, np.int64)
    plain = ChunkSampler(d, np.arange(8), H, 0).batch_at(idx, prefix)
    held = ChunkSampler(d, np.arange(8), H, 0, hold_after_success=True).batch_at(idx, prefix)
    expected_mask = [[True, True, False, False, False, False]] * 2
    assert plain[keys.ACTION_MASK].tolist() == expected_mask
    # episode 0 succeeded: its tail is trained as holding action 3; episode 1 failed: still masked
    assert held[keys.ACTION_MASK].tolist() == [[True] * H, expected_mask[1]]
    assert held[keys.ACTION][0, :, 0].tolist() == [2, 3, 3, 3, 3, 3]


def test_state_noise_is_in_training_standard_deviations_and_leaves_actions_alone():
    d = demos([True] * 50)
    frames = np.arange(len(d.state))
    clean = ChunkSampler(d, frames, H, 2)
    noisy = ChunkSampler(d, frames, H, 2, state_noise=0.1)
    a = clean.batch(np.random.default_rng(0), 4000)
    b = noisy.batch(np.random.default_rng(0), 4000)
    assert np.array_equal(a[keys.ACTION], b[keys.ACTION])
    diff = (b[keys.STATE] - a[keys.STATE]).numpy()
    np.testing.assert_allclose(diff.std(0), 0.1 * d.state.std(0), rtol=0.08)
    assert abs(diff.mean(0)[1]) < 0.01 * d.state[:, 1].std()


def test_pretrain_uses_noise_for_training_batches_only(tmp_path):
    from robotrl.policy.pretrain import Pretrainer

    policy = ["policy=flow_tiny", "policy.horizon=6", "policy.max_delay=2", "policy.device=cpu"]
    pretrain = ["pretrain.state_noise=0.2", "pretrain.hold_after_success=true", "pretrain.val_fraction=0"]
    cfg = load_config([*policy, f"run_dir={tmp_path}", *pretrain])
    d = demos([True, True, False])
    p = Pretrainer(cfg, d)

    def dataset_rows(states: np.ndarray) -> bool:
        return all((d.state == row).all(1).any() for row in states)

    assert all(dataset_rows(b[keys.STATE].numpy()) for b in p.val_set)  # validation: clean states
    assert not dataset_rows(p.train.batch(np.random.default_rng(0), 8)[keys.STATE].numpy())
    assert p.train.hold.any() and p.val.hold.any()  # both train the held rows


@pytest.mark.parametrize("override", ["pretrain.state_noise=-0.1", "pretrain.state_noise=3"])
def test_bad_state_noise_names_the_field(override):
    with pytest.raises(ConfigError, match=r"pretrain\.state_noise"):
        load_config([override])
