"""The lerobot adapter end to end, offline: a random-weight ACT saved and reloaded from disk."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from robotrl.config.policy import PolicyConfig, PolicyKind
from robotrl.core import keys
from robotrl.core.protocols import ChunkPolicy
from robotrl.core.types import EnvSpec, Observation
from robotrl.policy import CheckpointError, build_policy, load_policy, save_policy
from robotrl.policy.lerobot import LerobotChunkPolicy, blend_into_prefix

H, A, S, IMG = 8, 6, 12, 32


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def act_dir(tmp_path_factory):
    """ACT with random weights (no pretrained backbone: nothing downloaded), saved the lerobot way."""
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    torch.manual_seed(0)
    config = ACTConfig(
        input_features={
            keys.STATE: PolicyFeature(FeatureType.STATE, (S,)),
            keys.IMAGE_PREFIX + "front": PolicyFeature(FeatureType.VISUAL, (3, IMG, IMG)),
        },
        output_features={keys.ACTION: PolicyFeature(FeatureType.ACTION, (A,))},
        chunk_size=H,
        n_action_steps=H,
        pretrained_backbone_weights=None,
        dim_model=64,
        n_heads=2,
        dim_feedforward=128,
        n_encoder_layers=1,
        n_decoder_layers=1,
        latent_dim=8,
        device="cpu",
    )
    stats = {
        keys.STATE: {"mean": torch.zeros(S), "std": torch.ones(S)},
        keys.ACTION: {"mean": torch.full((A,), 20.0), "std": torch.full((A,), 5.0)},
        keys.IMAGE_PREFIX + "front": {"mean": torch.full((3, 1, 1), 0.5), "std": torch.full((3, 1, 1), 0.25)},
    }
    policy = ACTPolicy(config)
    pre, post = make_pre_post_processors(config, dataset_stats=stats)
    out = tmp_path_factory.mktemp("act") / "pretrained_model"
    policy.save_pretrained(out)
    pre.save_pretrained(out)
    post.save_pretrained(out)
    return out


def spec() -> EnvSpec:
    return EnvSpec(
        "act-test",
        tuple(f"j{i}" for i in range(A)),
        (-100.0,) * A,
        (100.0,) * A,
        tuple(f"s{i}" for i in range(S)),
        {"front": (IMG, IMG, 3), "wrist": (IMG, IMG, 3)},
        instruction="pick",
    )


def observation(seed: int = 0) -> Observation:
    rng = np.random.default_rng(seed)
    images = {c: rng.integers(0, 256, (IMG, IMG, 3), dtype=np.uint8) for c in ("front", "wrist")}
    return Observation(0, rng.standard_normal(S).astype(np.float32), images, "pick")


def batch(b: int = 4) -> dict[str, object]:
    g = torch.Generator().manual_seed(1)
    return {
        keys.STATE: torch.randn(b, S, generator=g),
        keys.IMAGE_PREFIX + "front": torch.randint(0, 256, (b, IMG, IMG, 3), generator=g, dtype=torch.uint8),
        keys.TASK: ["pick"] * b,
        keys.ACTION: 20 + 5 * torch.randn(b, H, A, generator=g),
        keys.PREFIX_LEN: torch.tensor([0, 2, H, 1])[:b],
        keys.ACTION_MASK: torch.ones(b, H, dtype=torch.bool),
    }


def load(act_dir) -> LerobotChunkPolicy:
    cfg = PolicyConfig(kind=PolicyKind.lerobot, path=str(act_dir), horizon=H, device="cpu")
    policy = build_policy(cfg, spec())
    assert isinstance(policy, LerobotChunkPolicy)
    return policy


def test_act_loads_offline_and_infers_a_chunk_in_action_units(act_dir):
    policy = load(act_dir)
    assert isinstance(policy, ChunkPolicy) and policy.horizon == H and not policy.uses_rtc
    chunk = policy.infer(observation(), None, 0)
    assert chunk.shape == (H, A) and chunk.dtype == np.float32
    assert 5 < float(np.mean(chunk)) < 35  # un-normalised around the action mean (20), not around 0


def test_prefix_is_exact_and_blended_continuation_starts_from_it(act_dir):
    policy = load(act_dir)
    raw = policy.infer(observation(), None, 0)
    prefix = np.full((3, A), 50.0, np.float32)
    chunk = policy.infer(observation(), prefix, 3)
    assert np.array_equal(chunk[:3], prefix)
    # ACT is deterministic at inference, so the continuation is the raw chunk shifted towards the prefix.
    assert np.abs(chunk[3] - prefix[-1]).max() < np.abs(raw[3] - prefix[-1]).max()
    np.testing.assert_allclose(chunk[-1], raw[-1], rtol=1e-5, atol=1e-4)


def test_blend_fades_the_junction_offset():
    chunk = np.zeros((10, 1), np.float32)
    blend_into_prefix(chunk, np.full((2, 1), 9.0, np.float32), ticks=2)
    np.testing.assert_allclose(chunk[2:5, 0], [6.0, 3.0, 0.0])


def test_per_sample_loss_has_batch_length_excludes_prefix_and_trains(act_dir):
    policy = load(act_dir)  # eval mode: no dropout, no VAE sampling, so the loss is ACT's L1 alone
    data = batch()
    losses = policy.per_sample_loss(data)
    assert losses.shape == (4,) and torch.isfinite(losses).all()
    assert losses[2].item() == 0.0 and (losses[[0, 1, 3]] > 0).all()  # sample 2 is all committed prefix
    in_prefix_changed = {**data, keys.ACTION: data[keys.ACTION].clone()}  # type: ignore[attr-defined]
    in_prefix_changed[keys.ACTION][1, :2] += 100.0  # rows of sample 1's prefix: no loss there
    torch.testing.assert_close(policy.per_sample_loss(in_prefix_changed), losses)
    policy.train()
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    first = None
    for _ in range(10):
        loss = policy.per_sample_loss(data).mean()
        first = loss.item() if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < first * 0.7


def test_weights_round_trip_and_checkpoint_reloads_identically(act_dir, tmp_path):
    a, b = load(act_dir), load(act_dir)
    with torch.no_grad():
        for p in b.parameters():
            p.add_(0.1)
    assert not np.array_equal(a.infer(observation(), None, 0), b.infer(observation(), None, 0))
    b.load_weights(a.trainable_tensors())
    assert np.array_equal(a.infer(observation(), None, 0), b.infer(observation(), None, 0))
    save_policy(a, tmp_path / "ckpt")
    reloaded = load_policy(tmp_path / "ckpt")
    assert isinstance(reloaded, LerobotChunkPolicy)
    assert np.array_equal(a.infer(observation(), None, 0), reloaded.infer(observation(), None, 0))
    meta = json.loads((tmp_path / "ckpt" / "robotrl_policy.json").read_text())
    assert meta["architecture"] == "robotrl.lerobot" and meta["lerobot_type"] == "act"


def test_bad_observation_and_wrong_architecture_are_named(act_dir, tmp_path):
    policy = load(act_dir)
    obs = observation()
    with pytest.raises(ValueError, match=r"observation\.images\.front.*missing"):
        policy.infer(Observation(0, obs.state, {"wrist": obs.images["wrist"]}), None, 0)
    with pytest.raises(ValueError, match=r"observation\.state"):
        policy.infer(Observation(0, obs.state[:3], obs.images), None, 0)
    with pytest.raises(CheckpointError, match=r"no config\.json"):
        LerobotChunkPolicy.load(tmp_path)
    save_policy(policy, tmp_path / "ckpt")
    from robotrl.policy.flow import FlowChunkPolicy

    with pytest.raises(CheckpointError, match=r"architecture 'robotrl\.lerobot'"):
        FlowChunkPolicy.load(tmp_path / "ckpt")


@pytest.mark.parametrize("policy_type", ["smolvla", "pi0", "pi05"])
def test_vla_adapter_paths_match_lerobots_real_classes(policy_type):
    """SmolVLA and pi0/pi05 need hub files to instantiate; what the adapter relies on is checked on
    their real classes and configs: RTC is switched on before construction, predict_action_chunk
    takes the RTC arguments, and forward returns per-sample losses."""
    import inspect

    from lerobot.policies.factory import get_policy_class, make_policy_config

    from robotrl.policy.lerobot import enable_rtc

    cls = get_policy_class(policy_type)
    config = make_policy_config(policy_type, device="cpu")
    assert enable_rtc(cls, config) and config.rtc_config.enabled
    inspect.signature(cls.predict_action_chunk).bind(
        object(), {}, inference_delay=2, prev_chunk_left_over=None
    )
    assert "reduction" in inspect.signature(cls.forward).parameters


def test_act_and_diffusion_fall_back_to_blending():
    from lerobot.policies.factory import get_policy_class, make_policy_config

    from robotrl.policy.lerobot import enable_rtc

    for policy_type in ("act", "diffusion"):
        config = make_policy_config(policy_type, device="cpu")
        assert not enable_rtc(get_policy_class(policy_type), config)


def test_lerobot_train_and_plain_folders_load_for_every_role(act_dir, tmp_path):
    """A folder lerobot wrote, without robotrl's metadata, loads by its layout: the
    ``save_pretrained`` folder itself, and a ``lerobot-train`` step folder holding
    ``pretrained_model/`` (``checkpoints/last`` is a link to one); the actor builds it with
    the env's spec, so its action bounds are the env's."""
    import shutil

    from robotrl.actor.compose import make_policy

    step = tmp_path / "outputs" / "checkpoints" / "000010"
    shutil.copytree(act_dir, step / "pretrained_model")
    (step.parent / "last").symlink_to(step.name)
    for folder in (act_dir, step, step.parent / "last"):
        assert isinstance(load_policy(folder), LerobotChunkPolicy)
    cfg = PolicyConfig(kind=PolicyKind.lerobot, path=str(step.parent / "last"), horizon=H, device="cpu")
    actor_policy = make_policy(cfg, spec())
    assert isinstance(actor_policy, LerobotChunkPolicy) and actor_policy.spec == spec()
    with pytest.raises(CheckpointError, match=r"no config\.json, nor pretrained_model/config\.json"):
        make_policy(PolicyConfig(kind=PolicyKind.lerobot, path=str(tmp_path), horizon=H), spec())


def test_rtc_chunk_with_a_prefix_takes_its_gradient_outside_inference_mode(act_dir, monkeypatch):
    """lerobot's real RTC guidance differentiates through the denoiser, which inference mode
    forbids: a VLA's sampling loop in miniature (Euler steps, each velocity guided by the real
    ``RTCProcessor``) stands in for SmolVLA's, which cannot be built without its backbone."""
    from lerobot.policies.rtc.configuration_rtc import RTCConfig
    from lerobot.policies.rtc.modeling_rtc import RTCProcessor

    policy = load(act_dir)
    rtc = RTCProcessor(RTCConfig(enabled=True, execution_horizon=H))

    def denoiser(x_t):  # rows coupled, as attention couples them in a VLA's action expert
        return x_t - 1 + x_t.mean(dim=1, keepdim=True)

    def predict_action_chunk(batch, inference_delay=0, prev_chunk_left_over=None):
        x, steps = torch.zeros(1, H, A), 4
        for i in range(steps):
            velocity = rtc.denoise_step(x, prev_chunk_left_over, inference_delay, 1 - i / steps, denoiser)
            x = x - velocity / steps
        return x

    monkeypatch.setattr(policy.policy, "supports_rtc", lambda: True)
    monkeypatch.setattr(policy.policy, "predict_action_chunk", predict_action_chunk)
    monkeypatch.setattr(policy.config, "rtc_config", RTCConfig(enabled=True), raising=False)
    assert policy.uses_rtc
    prefix = np.full((3, A), 30.0, np.float32)
    guided, free = policy.infer(observation(), prefix, 3), policy.infer(observation(), None, 0)
    assert np.array_equal(guided[:3], prefix) and np.isfinite(guided).all()
    assert not np.allclose(guided[3:], free[3:])  # the guidance reached past the prefix
    with torch.inference_mode(), pytest.raises(RuntimeError, match="grad"):
        predict_action_chunk(None, 3, torch.ones(1, 3, A))
