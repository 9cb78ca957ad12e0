"""FlowChunkPolicy: learning, prefix conditioning, per-sample loss, weights and checkpoints."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from robotrl.actor.compose import make_policy as actor_policy
from robotrl.config.load import ConfigError
from robotrl.config.policy import PolicyConfig, PolicySize
from robotrl.core import keys
from robotrl.core.protocols import ChunkPolicy
from robotrl.core.types import EnvSpec, Observation
from robotrl.policy import CheckpointError, build_policy, load_policy, save_policy
from robotrl.policy.checkpoint import META_FILE
from robotrl.policy.flow import FlowChunkPolicy, parameter_count

H, A, S = 16, 6, 12
CAMS = ("front", "wrist")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def make_spec(cameras: tuple[str, ...] = CAMS) -> EnvSpec:
    return EnvSpec(
        name="test",
        action_names=tuple(f"a{i}" for i in range(A)),
        action_low=(-2.0,) * A,
        action_high=(2.0,) * A,
        state_names=tuple(f"s{i}" for i in range(S)),
        camera_shapes={c: (32, 32, 3) for c in cameras},
        instruction="pick the cube",
    )


def make_policy(size: PolicySize = PolicySize.tiny, **kw: object) -> FlowChunkPolicy:
    torch.manual_seed(0)
    cfg = PolicyConfig(size=size, horizon=H, max_delay=6, device="cpu", **kw)  # type: ignore[arg-type]
    return FlowChunkPolicy(make_spec(), cfg).eval()


def synthetic_batch(b: int, seed: int = 0) -> dict[str, object]:
    """Chunks that are smooth ramps set by the state: learnable, and a prefix pins the ramp."""
    g = torch.Generator().manual_seed(seed)
    state = torch.randn(b, S, generator=g)
    steps = torch.arange(H).float().view(1, H, 1) / H
    action = state[:, :A].unsqueeze(1) * 0.5 + steps * state[:, A : 2 * A].unsqueeze(1)
    return {
        keys.STATE: state,
        **{
            keys.IMAGE_PREFIX + c: torch.randint(0, 256, (b, 32, 32, 3), generator=g, dtype=torch.uint8)
            for c in CAMS
        },
        keys.TASK: ["pick the cube"] * b,
        keys.ACTION: action,
        keys.PREFIX_LEN: torch.randint(0, 7, (b,), generator=g),
        keys.ACTION_MASK: torch.ones(b, H, dtype=torch.bool),
    }


def observation_of(batch: dict[str, object], i: int) -> Observation:
    images = {c: batch[keys.IMAGE_PREFIX + c][i].numpy() for c in CAMS}  # type: ignore[index]
    return Observation(0, batch[keys.STATE][i].numpy(), images, "pick the cube")  # type: ignore[index]


def test_sizes_match_their_presets():
    assert parameter_count(make_policy(PolicySize.tiny)) <= 500_000
    assert 500_000 <= parameter_count(make_policy(PolicySize.mini)) <= 2_000_000
    assert 5_000_000 <= parameter_count(make_policy(PolicySize.small)) <= 15_000_000
    assert 50_000_000 <= parameter_count(make_policy(PolicySize.base)) <= 100_000_000


def test_policy_satisfies_the_chunk_policy_protocol():
    assert isinstance(make_policy(), ChunkPolicy)


@pytest.mark.slow
def test_tiny_policy_overfits_a_batch_and_continues_a_given_prefix():
    policy = make_policy().train()
    batch = synthetic_batch(8)

    def fixed_noise_loss() -> float:
        with torch.no_grad():
            return policy.per_sample_loss(batch, generator=torch.Generator().manual_seed(0)).mean().item()

    before = fixed_noise_loss()
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    torch.manual_seed(1)
    for _ in range(400):
        loss = policy.per_sample_loss(batch).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = fixed_noise_loss()
    assert after < before / 8, (before, after)

    policy.eval()
    truth = batch[keys.ACTION][0].numpy()  # type: ignore[index]
    d = 5
    chunk = policy.infer(observation_of(batch, 0), truth[:d], d)
    assert np.array_equal(chunk[:d], truth[:d])
    assert np.abs(chunk[d:] - truth[d:]).mean() < 0.35 * np.abs(truth[d:]).mean()


@pytest.mark.parametrize("delay", [0, 1, 6, H])
def test_given_prefix_is_reproduced_exactly(delay):
    policy = make_policy()
    obs = observation_of(synthetic_batch(1), 0)
    prefix = np.random.default_rng(delay).uniform(-3, 3, (delay, A)).astype(np.float32)  # beyond bounds too
    chunk = policy.infer(obs, prefix if delay else None, delay)
    assert chunk.shape == (H, A) and chunk.dtype == np.float32
    assert np.array_equal(chunk[:delay], prefix)
    assert np.isfinite(chunk).all()


def test_per_sample_loss_has_batch_length_and_each_sample_stands_alone():
    policy = make_policy()
    batch = synthetic_batch(5)
    torch.manual_seed(3)
    base = policy.per_sample_loss(batch)
    assert base.shape == (5,)
    changed = dict(batch)
    changed[keys.STATE] = batch[keys.STATE].clone()  # type: ignore[attr-defined]
    changed[keys.STATE][2] += 5.0
    changed[keys.ACTION] = batch[keys.ACTION].clone()  # type: ignore[attr-defined]
    changed[keys.ACTION][2] -= 1.0
    torch.manual_seed(3)
    other = policy.per_sample_loss(changed)
    keep = [0, 1, 3, 4]
    torch.testing.assert_close(other[keep], base[keep])
    assert not torch.isclose(other[2], base[2])


def test_weighted_loss_ignores_zero_weight_and_fully_committed_samples():
    policy = make_policy()
    batch = synthetic_batch(4)
    batch[keys.PREFIX_LEN] = torch.tensor([0, 3, H, 2])  # sample 2: every row is committed prefix
    batch[keys.ACTION_MASK] = torch.ones(4, H, dtype=torch.bool)
    batch[keys.ACTION_MASK][3, 2:] = False  # sample 3: prefix 2 then padding: nothing to learn
    torch.manual_seed(0)
    losses = policy.per_sample_loss(batch)
    assert losses[2].item() == 0.0 and losses[3].item() == 0.0
    assert losses[0] > 0 and losses[1] > 0
    weights = torch.tensor([0.0, 1.0, 7.0, 7.0])
    (weights * losses).sum().backward()
    grad_weighted = [p.grad.clone() for p in policy.parameters() if p.grad is not None]
    policy.zero_grad()
    torch.manual_seed(0)
    policy.per_sample_loss(batch)[1].backward()
    grad_one = [p.grad for p in policy.parameters() if p.grad is not None]
    for a, b in zip(grad_weighted, grad_one, strict=True):
        torch.testing.assert_close(a, b)


def test_save_then_load_gives_identical_outputs_for_the_same_noise(tmp_path):
    policy = make_policy()
    policy.set_normalization(
        {
            "state_mean": np.full(S, 0.1, np.float32),
            "state_std": np.full(S, 2.0, np.float32),
            "action_mean": np.full(A, -0.3, np.float32),
            "action_std": np.full(A, 0.7, np.float32),
        }
    )
    save_policy(policy, tmp_path / "ckpt")
    loaded = load_policy(tmp_path / "ckpt")
    assert isinstance(loaded, FlowChunkPolicy)
    obs = observation_of(synthetic_batch(1), 0)
    noise = np.random.default_rng(0).standard_normal((H, A)).astype(np.float32)
    prefix = np.ones((3, A), np.float32)
    assert np.array_equal(
        policy.infer(obs, prefix, 3, noise=noise), loaded.infer(obs, prefix, 3, noise=noise)
    )
    assert np.array_equal(loaded.normalization()["action_std"], np.full(A, 0.7, np.float32))


def test_noise_scale_scales_the_drawn_start_and_a_checkpoint_takes_it_from_the_config(tmp_path):
    obs = observation_of(synthetic_batch(1), 0)
    prefix = np.ones((3, A), np.float32)
    zero = make_policy().infer(obs, prefix, 3, noise=np.zeros((H, A), np.float32))
    cold = make_policy(noise_scale=0.0)
    cold.seed(1)
    first = cold.infer(obs, prefix, 3)
    cold.seed(2)
    assert np.array_equal(first, cold.infer(obs, prefix, 3)) and np.array_equal(first, zero)
    warm = make_policy()
    warm.seed(1)
    assert not np.allclose(warm.infer(obs, prefix, 3), zero)
    # An inference setting: the config that loads a checkpoint decides it, not the checkpoint.
    save_policy(warm, tmp_path / "ckpt")
    cfg = PolicyConfig(
        size=PolicySize.tiny, horizon=H, max_delay=6, path=str(tmp_path / "ckpt"), noise_scale=0.0
    )
    loaded = build_policy(cfg, make_spec())
    assert isinstance(loaded, FlowChunkPolicy) and loaded.cfg.noise_scale == 0.0
    assert np.array_equal(loaded.infer(obs, prefix, 3), zero)
    # The actor's loader (any architecture by path) applies them too.
    cfg.flow_steps = 3
    acting = actor_policy(cfg, make_spec())
    assert isinstance(acting, FlowChunkPolicy)
    assert (acting.cfg.noise_scale, acting.cfg.flow_steps) == (0.0, 3)


def test_the_actor_runs_a_checkpoint_of_another_size_as_saved_and_says_so(tmp_path, caplog):
    save_policy(make_policy(), tmp_path / "ckpt")
    cfg = PolicyConfig(size=PolicySize.small, horizon=H, path=str(tmp_path / "ckpt"), device="cpu")
    with caplog.at_level(logging.WARNING, logger="robotrl.actor.compose"):
        acting = actor_policy(cfg, make_spec())
    assert isinstance(acting, FlowChunkPolicy) and acting.cfg.size is PolicySize.tiny
    assert "holds a tiny flow policy" in caplog.text
    caplog.clear()
    cfg.size = PolicySize.tiny
    with caplog.at_level(logging.WARNING, logger="robotrl.actor.compose"):
        actor_policy(cfg, make_spec())
    assert caplog.text == ""


def test_the_actor_refuses_a_checkpoint_its_robot_cannot_feed_and_says_what_differs(tmp_path):
    save_policy(make_policy(), tmp_path / "ckpt")  # reads front and wrist at 32x32 and 12 state columns
    cfg = PolicyConfig(size=PolicySize.tiny, horizon=H, path=str(tmp_path / "ckpt"), device="cpu")
    no_wrist = make_spec(("front",))
    with pytest.raises(
        ConfigError, match=r"reads camera 'wrist', the robot has \['front'\].*hardware\.cameras"
    ):
        actor_policy(cfg, no_wrist)
    bigger = dataclasses.replace(make_spec(), camera_shapes={c: (64, 64, 3) for c in CAMS})
    with pytest.raises(ConfigError, match=r"camera 'front' at \(32, 32, 3\), the robot gives \(64, 64, 3\)"):
        actor_policy(cfg, bigger)
    more_state = dataclasses.replace(make_spec(), state_names=tuple(f"s{i}" for i in range(S + 7)))
    with pytest.raises(ConfigError, match=f"state of {S} columns, the robot gives {S + 7}"):
        actor_policy(cfg, more_state)
    # A robot with an extra camera feeds it: the policy reads the ones it was trained on.
    extra = dataclasses.replace(make_spec(), camera_shapes={**make_spec().camera_shapes, "top": (8, 8, 3)})
    assert isinstance(actor_policy(cfg, extra), FlowChunkPolicy)


def test_build_policy_loads_a_checkpoint_and_refuses_another_size(tmp_path):
    policy = make_policy()
    save_policy(policy, tmp_path / "ckpt")
    cfg = PolicyConfig(
        size=PolicySize.tiny, horizon=H, max_delay=6, path=str(tmp_path / "ckpt"), device="cpu"
    )
    assert isinstance(build_policy(cfg, make_spec()), FlowChunkPolicy)
    cfg.size = PolicySize.small
    with pytest.raises(CheckpointError, match="size tiny"):
        build_policy(cfg, make_spec())
    cfg.size = PolicySize.tiny
    with pytest.raises(CheckpointError, match="cameras"):
        build_policy(cfg, make_spec(cameras=("front",)))


def test_checkpoint_of_another_architecture_is_refused(tmp_path):
    save_policy(make_policy(), tmp_path / "ckpt")
    meta_file = tmp_path / "ckpt" / META_FILE
    meta = json.loads(meta_file.read_text())
    meta["architecture"] = "robotrl.lerobot"
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"architecture 'robotrl.lerobot'.*'robotrl.flow'"):
        FlowChunkPolicy.load(tmp_path / "ckpt")
    with pytest.raises(CheckpointError, match="not a robotrl policy checkpoint"):
        load_policy(Path(__file__).parent)


def test_weights_copy_in_place_and_reproduce_outputs():
    a, b = make_policy(), make_policy()
    torch.manual_seed(9)
    for p in b.parameters():
        p.data.normal_()
    pointers = [p.data_ptr() for p in b.parameters()]
    b.load_weights(a.trainable_tensors())
    assert pointers == [p.data_ptr() for p in b.parameters()]
    obs = observation_of(synthetic_batch(1), 0)
    noise = np.zeros((H, A), np.float32)
    assert np.array_equal(a.infer(obs, None, 0, noise=noise), b.infer(obs, None, 0, noise=noise))


def test_trainable_tensors_are_a_snapshot():
    policy = make_policy()
    tensors = policy.trainable_tensors()
    name = next(iter(tensors))
    before = tensors[name].copy()
    with torch.no_grad():
        dict(policy.named_parameters())[name].add_(1.0)
    assert np.array_equal(tensors[name], before)


def test_load_weights_rejects_mismatches_without_changing_anything():
    tiny, small = make_policy(PolicySize.tiny), make_policy(PolicySize.small)
    before = {k: v.copy() for k, v in small.trainable_tensors().items()}
    tensors = tiny.trainable_tensors()
    with pytest.raises(ValueError, match="shape"):
        small.load_weights(tensors)
    bad = small.trainable_tensors()
    name = next(iter(bad))
    bad[name] = bad[name].astype(np.float64)
    with pytest.raises(ValueError, match=f"{name}.*float64"):
        small.load_weights(bad)
    with pytest.raises(KeyError, match="nope"):
        small.load_weights({"nope": np.zeros(1, np.float32)})
    after = small.trainable_tensors()
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_observation_missing_a_camera_or_misshapen_is_named():
    policy = make_policy()
    obs = observation_of(synthetic_batch(1), 0)
    with pytest.raises(ValueError, match=r"observation\.images\.wrist.*missing"):
        policy.infer(Observation(0, obs.state, {"front": obs.images["front"]}), None, 0)
    with pytest.raises(ValueError, match=r"observation\.images\.front.*\(32, 32, 3\)"):
        policy.infer(
            Observation(0, obs.state, {**obs.images, "front": np.zeros((16, 32, 3), np.uint8)}), None, 0
        )
    with pytest.raises(ValueError, match=r"observation\.state.*\(12,\)"):
        policy.infer(Observation(0, obs.state[:5], obs.images), None, 0)
    with pytest.raises(ValueError, match="prefix"):
        policy.infer(obs, np.zeros((2, A), np.float32), 3)


def test_training_batch_missing_a_key_is_named():
    batch = synthetic_batch(2)
    del batch[keys.IMAGE_PREFIX + "wrist"]
    with pytest.raises(KeyError, match=r"observation\.images\.wrist"):
        make_policy().per_sample_loss(batch)


def test_state_only_policy_needs_no_images():
    torch.manual_seed(0)
    policy = FlowChunkPolicy(
        make_spec(cameras=()), PolicyConfig(size=PolicySize.tiny, horizon=H, max_delay=4)
    )
    chunk = policy.infer(Observation(0, np.zeros(S, np.float32)), None, 0)
    assert chunk.shape == (H, A)


def test_a_state_feature_constant_in_training_cannot_move_the_chunk():
    """The wrist roll velocity the demonstrations never moved: z-scored by its floored std,
    a deviation of 5 units/s was thousands of sigmas and the chunks turned to noise."""
    policy = FlowChunkPolicy(
        make_spec(cameras=()), PolicyConfig(size=PolicySize.tiny, horizon=H, max_delay=4)
    )
    std = np.ones(S, np.float32)
    std[1] = 1e-4  # constant in training: floored to MIN_STD, then held at 0
    policy.set_normalization(
        {
            "state_mean": np.zeros(S, np.float32),
            "state_std": std,
            "action_mean": np.zeros(A, np.float32),
            "action_std": np.ones(A, np.float32),
        }
    )
    noise = np.random.default_rng(0).normal(size=(H, A)).astype(np.float32)
    state = np.zeros(S, np.float32)
    moved = state.copy()
    moved[1] = 5.0
    base = policy.infer(Observation(0, state), None, 0, noise=noise)
    np.testing.assert_array_equal(policy.infer(Observation(0, moved), None, 0, noise=noise), base)
    informative = state.copy()
    informative[0] = 5.0  # a feature that varied in training still matters
    assert not np.allclose(policy.infer(Observation(0, informative), None, 0, noise=noise), base)
