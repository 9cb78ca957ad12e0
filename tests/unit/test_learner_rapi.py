"""RAPI and BC on tasks whose answers are known: critic values, mode selection, warm-up, resume."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from learner_doubles import MLPChunkPolicy, episode_batch

from robotrl.config.learner import AdvantageKind, LearnerConfig, RapiConfig
from robotrl.core import keys
from robotrl.learner.bc import BehaviourCloning
from robotrl.learner.rapi import RAPI, effective_share, expectile_loss, temperature_for_share
from robotrl.learner.replay import ChunkReplay, ReplaySpec
from robotrl.learner.samples import ACTOR_SAMPLE_KEY, NEXT_PREFIX, POLICY_MASK_KEY, RETURN_TO_GO_KEY
from robotrl.learner.torch_utils import to_torch

CPU = torch.device("cpu")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def quick_cfg(**kw: object) -> LearnerConfig:
    base = dict(
        critic_images=False,
        critic_hidden=64,
        lr=1e-3,
        target_tau=0.05,
        critic_updates_per_group=50,
        actor_updates_per_group=10,
        critic_warmup_updates=0,
        batch_size=64,
    )
    base.update(kw)
    rapi = {f.name for f in dataclasses.fields(RapiConfig)}
    return LearnerConfig(
        rapi=RapiConfig(**{k: v for k, v in base.items() if k in rapi}),  # type: ignore[arg-type]
        **{k: v for k, v in base.items() if k not in rapi},  # type: ignore[arg-type]
    )


def test_expectile_loss_weights_underestimates_by_tau():
    diff = torch.tensor([1.0, -1.0])
    assert expectile_loss(diff[:1], 0.7).item() == pytest.approx(0.7)
    assert expectile_loss(diff[1:], 0.7).item() == pytest.approx(0.3)


def test_effective_share_is_one_for_uniform_weights_and_one_over_n_for_a_single_sample():
    assert effective_share(torch.full((8,), 3.0)) == pytest.approx(1.0)
    assert effective_share(torch.tensor([5.0, 0.0, 0.0, 0.0])) == pytest.approx(0.25)
    assert effective_share(torch.tensor([1.0, 1.0, 0.0, 0.0])) == pytest.approx(0.5)
    assert effective_share(torch.zeros(0)) == 0.0


def test_temperature_for_share_gives_weights_of_that_effective_share():
    adv = torch.linspace(-1.0, 1.0, 64) ** 3
    for share in (0.6, 0.75, 0.9):
        beta = temperature_for_share(adv, share, clip=3.0)
        assert effective_share(torch.exp(torch.clamp(adv / beta, -3, 3))) == pytest.approx(share, abs=1e-3)
    # Clipped at the smallest beta the share is still about 0.5 (half e^3, half e^-3): the clip is
    # the floor, and the smallest beta the answer.
    assert temperature_for_share(adv, 0.2, clip=3.0) < 1e-5


def chain_replay(length: int, horizon: int, gamma: float) -> ChunkReplay:
    """A deterministic chain: state = one-hot(tick), reward 1 on the last tick, then terminal."""
    dim = length + 1
    buf = ChunkReplay(ReplaySpec(dim, 1, horizon, gamma=gamma), 4096)
    rewards = np.zeros(length)
    rewards[-1] = 1.0
    for ep in range(3):
        b = episode_batch(
            "a", ep, range(length), end="terminated", rewards=rewards, state_dim=2, action_dim=1
        )
        eye = np.eye(dim, dtype=np.float32)
        buf.add(dataclasses.replace(b, state=eye[:length], next_state=eye[length:]))
    return buf


def test_critic_converges_to_the_known_values_of_a_chain():
    torch.manual_seed(0)
    length, horizon, gamma = 8, 2, 0.9
    buf = chain_replay(length, horizon, gamma)
    rng = np.random.default_rng(0)
    algo = RAPI(MLPChunkPolicy(length + 1, horizon, 1), quick_cfg(gamma=gamma, lr=2e-3), CPU, length + 1, {})
    for _ in range(800):
        algo.critic_step(to_torch(buf.sample(64, rng), CPU))
    batch = to_torch(buf.sample(256, rng), CPU)
    tick = batch[keys.STATE].argmax(1).numpy()
    truth = gamma ** (length - 1 - tick)
    with torch.no_grad():
        q1, q2, v = algo.critic(batch)
    for est in (q1, q2, v):
        np.testing.assert_allclose(est.numpy(), truth, atol=0.01)


def two_mode_replay(horizon: int) -> ChunkReplay:
    """Identical states; half the episodes execute +1 everywhere (reward 1), half -1 (reward 0)."""
    buf = ChunkReplay(ReplaySpec(2, 1, horizon, gamma=0.99), 4096)
    for ep in range(40):
        good = ep % 2 == 0
        rewards = np.zeros(horizon)
        rewards[-1] = 1.0 if good else 0.0
        b = episode_batch("a", ep, range(horizon), end="terminated", rewards=rewards, action_dim=1, delay=0)
        state = np.stack([np.arange(horizon) / horizon, np.zeros(horizon)], 1).astype(np.float32)
        action = np.full((horizon, 1), 1.0 if good else -1.0, np.float32)
        buf.add(dataclasses.replace(b, state=state, action=action, proposed_action=action))
    return buf


def mean_first_action(policy: MLPChunkPolicy, horizon: int) -> float:
    batch = {
        keys.STATE: torch.zeros(1, 2),
        keys.PREFIX_LEN: torch.zeros(1, dtype=torch.int64),
        keys.ACTION_MASK: torch.ones(1, horizon, dtype=torch.bool),
    }
    with torch.no_grad():
        return float(
            policy._forward(batch[keys.STATE], torch.zeros(1, horizon, 1), batch[keys.PREFIX_LEN]).mean()
        )


def test_advantage_weighting_picks_the_better_mode_while_bc_stays_at_the_mixture():
    horizon = 4
    buf = two_mode_replay(horizon)
    results, logs = {}, {}
    for name in ("rapi", "bc"):
        torch.manual_seed(1)
        rng = np.random.default_rng(1)
        policy = MLPChunkPolicy(2, horizon, 1)
        cfg = quick_cfg(critic_warmup_updates=200, critic_updates_per_group=20, lr=2e-3)
        algo = RAPI(policy, cfg, CPU, 2, {}) if name == "rapi" else BehaviourCloning(policy, cfg, CPU)
        for _ in range(30):
            logs[name] = algo.update_group(lambda rng=rng: buf.sample(64, rng))
        results[name] = mean_first_action(policy, horizon)
    # RAPI's weighted mean is tanh(A/beta)-like: well on the +1 side; BC averages +1 and -1.
    assert results["rapi"] > 0.5, results
    assert abs(results["bc"]) < 0.25, results
    # Choosing the good half costs about half of each batch: the logged effective share says so.
    assert 0.3 < logs["rapi"]["weight_ess"] < 0.8, logs["rapi"]
    assert "weight_ess" not in logs["bc"]


def test_a_target_weight_share_chooses_beta_per_batch_and_still_picks_the_better_mode():
    horizon = 4
    buf = two_mode_replay(horizon)
    torch.manual_seed(1)
    rng = np.random.default_rng(1)
    policy = MLPChunkPolicy(2, horizon, 1)
    cfg = quick_cfg(critic_warmup_updates=200, critic_updates_per_group=20, lr=2e-3, weight_ess=0.75)
    algo = RAPI(policy, cfg, CPU, 2, {})
    for _ in range(30):
        logs = algo.update_group(lambda: buf.sample(64, rng))
    assert mean_first_action(policy, horizon) > 0.3
    assert logs["weight_ess"] == pytest.approx(0.75, abs=0.01)
    assert logs["beta"] != cfg.rapi.beta


def test_no_actor_update_before_the_critic_warm_up():
    buf = two_mode_replay(4)
    rng = np.random.default_rng(2)
    policy = MLPChunkPolicy(2, 4, 1)
    algo = RAPI(
        policy,
        quick_cfg(critic_updates_per_group=5, actor_updates_per_group=2, critic_warmup_updates=10),
        CPU,
        2,
        [],
    )
    before = {k: v.copy() for k, v in algo.policy_weights().items()}
    first = algo.update_group(lambda: buf.sample(16, rng))
    assert first["actor_updates"] == 0
    assert all(np.array_equal(before[k], v) for k, v in algo.policy_weights().items())
    algo.update_group(lambda: buf.sample(16, rng))
    assert algo.actor_updates == 2  # the group that completes the warm-up already updates the actor
    third = algo.update_group(lambda: buf.sample(16, rng))
    assert third["actor_updates"] == 2 and algo.critic_updates == 15 and algo.actor_updates == 4


def test_state_dict_round_trip_restores_networks_optimisers_and_counters():
    buf = two_mode_replay(4)
    rng = np.random.default_rng(3)
    cfg = quick_cfg(critic_updates_per_group=3, actor_updates_per_group=2)
    a = RAPI(MLPChunkPolicy(2, 4, 1), cfg, CPU, 2, {})
    a.update_group(lambda: buf.sample(16, rng))
    b = RAPI(MLPChunkPolicy(2, 4, 1), cfg, CPU, 2, {})
    b.load_state_dict(a.state_dict())
    assert (b.critic_updates, b.actor_updates) == (3, 2)
    batch = to_torch(buf.sample(8, rng), CPU)
    with torch.no_grad():
        torch.testing.assert_close(a.critic(batch), b.critic(batch))
        torch.testing.assert_close(a.target(batch), b.target(batch))
    assert b.policy_opt.state_dict()["state"].keys() == a.policy_opt.state_dict()["state"].keys()


@pytest.mark.gpu
def test_rapi_runs_on_cuda_with_bf16_autocast_and_pinned_batches():
    device = torch.device("cuda")
    spec = ReplaySpec(2, 3, 4, cameras={"front": (96, 96, 3)}, gamma=0.9)
    buf = ChunkReplay(spec, 1024)
    for ep in range(6):
        buf.add(
            episode_batch("a", ep, range(10), end="terminated", rewards=[0] * 9 + [1], cameras=spec.cameras)
        )
    rng = np.random.default_rng(0)
    algo = RAPI(MLPChunkPolicy(2, 4, 3), quick_cfg(critic_images=True), device, 2, dict(spec.cameras))
    metrics = algo.update_group(lambda: buf.sample(32, rng))
    assert metrics["actor_updates"] == 10 and all(np.isfinite(v) for v in metrics.values())
    assert next(algo.critic.parameters()).device.type == "cuda"
    assert all(np.isfinite(w).all() for w in algo.policy_weights().values())


class NormalizedMLPPolicy(MLPChunkPolicy):
    """The MLP double with the flow policy's ``normalization()`` (training-data statistics)."""

    def __init__(self, stats: dict[str, np.ndarray], *args: int) -> None:
        super().__init__(*args)
        self.stats = stats

    def normalization(self) -> dict[str, np.ndarray]:
        return self.stats


def scaled_outcome_replay(rng: np.random.Generator) -> ChunkReplay:
    """One-tick episodes whose outcome (reward 1 or 0) only a centimetre-scale feature tells,
    beside a joint-angle-scale feature (degrees, std 50) that tells nothing: the pick-place state."""
    buf = ChunkReplay(ReplaySpec(2, 1, 1, gamma=0.99), 4096)
    for ep in range(200):
        good = ep % 2 == 0
        b = episode_batch("a", ep, range(1), end="terminated", rewards=[float(good)], action_dim=1, delay=0)
        state = np.array([[rng.normal(0.0, 50.0), 0.02 if good else -0.02]], np.float32)
        buf.add(dataclasses.replace(b, state=state, next_state=state))
    return buf


def test_the_critic_reads_state_in_the_policys_normalised_units():
    """Raw inputs hide a small-scale feature behind large ones; the policy's statistics reveal it."""
    buf = scaled_outcome_replay(np.random.default_rng(3))
    stats = {
        "state_mean": np.zeros(2, np.float32),
        "state_std": np.array([50.0, 0.02], np.float32),
        "action_mean": np.zeros(1, np.float32),
        "action_std": np.ones(1, np.float32),
    }
    gaps = {}
    for name, policy in (
        ("raw", MLPChunkPolicy(2, 1, 1)),
        ("normalised", NormalizedMLPPolicy(stats, 2, 1, 1)),
    ):
        torch.manual_seed(0)
        rng = np.random.default_rng(0)
        algo = RAPI(policy, quick_cfg(), CPU, 2, {})
        for _ in range(300):
            algo.critic_step(to_torch(buf.sample(64, rng), CPU))
        batch = to_torch(buf.sample(256, rng), CPU)
        good = batch[keys.STATE][:, 1] > 0
        with torch.no_grad():
            q1, _, _ = algo.critic(batch)
        gaps[name] = float(q1[good].mean() - q1[~good].mean())
    assert gaps["normalised"] > 0.8, gaps  # true gap: 1
    assert gaps["raw"] < 0.5, gaps  # what the critic learnt before it read the policy's statistics


def test_the_critic_holds_features_constant_in_the_policys_data_at_zero():
    """A joint the demonstrations never moved (std floored at 1e-3) must not swamp Q and V online."""
    stats = {
        "state_mean": np.zeros(2, np.float32),
        "state_std": np.array([1.0, 0.0], np.float32),
        "action_mean": np.zeros(2, np.float32),
        "action_std": np.array([1.0, 0.0], np.float32),
    }
    torch.manual_seed(0)
    algo = RAPI(NormalizedMLPPolicy(stats, 2, 1, 2), quick_cfg(), CPU, 2, {})
    b = episode_batch("a", 0, range(1), end="terminated", rewards=[0.0], action_dim=2, delay=0, state_dim=2)
    buf = ChunkReplay(ReplaySpec(2, 2, 1, gamma=0.99), 16)
    buf.add(b)
    batch = to_torch(buf.sample(1, np.random.default_rng(0)), CPU)
    moved = dict(batch)
    moved[keys.STATE] = batch[keys.STATE] + torch.tensor([0.0, 40.0])
    moved[NEXT_PREFIX + keys.STATE] = moved[keys.STATE]
    moved[keys.ACTION] = batch[keys.ACTION] + torch.tensor([0.0, 40.0])
    with torch.no_grad():
        before, after = algo.critic(batch), algo.critic(moved)
    for x, y in zip(before, after, strict=True):
        torch.testing.assert_close(x, y)
    shifted = dict(moved)
    shifted[keys.STATE] = moved[keys.STATE] + torch.tensor([1.0, 0.0])  # a feature that varied still counts
    with torch.no_grad():
        assert not torch.allclose(algo.critic(shifted)[2], after[2])


def test_actor_weights_are_a_weighted_mean_and_the_policy_has_its_own_learning_rate():
    """Scaling every advantage weight by 100 leaves the policy gradient unchanged (weights choose
    what to imitate, not how far to step), and ``policy_lr`` sets the policy optimiser alone."""
    buf = two_mode_replay(4)
    batch = to_torch(buf.sample(64, np.random.default_rng(5)), CPU)
    grads = []
    for scale in (1.0, 100.0):
        torch.manual_seed(4)
        algo = RAPI(MLPChunkPolicy(2, 4, 1), quick_cfg(lr=1e-3, policy_lr=1e-4), CPU, 2, {})
        assert algo.policy_opt.param_groups[0]["lr"] == 1e-4
        assert algo.critic_opt.param_groups[0]["lr"] == 1e-3
        algo._policy_step(batch, torch.linspace(0.1, 3.0, 64) * scale)
        grads.append(torch.cat([p.grad.flatten() for p in algo.policy_params]))
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-7)


def test_the_policys_learning_rate_follows_a_half_cosine_to_its_end_fraction():
    algo = BehaviourCloning(MLPChunkPolicy(2, 4, 1), quick_cfg(policy_lr=1e-3, policy_lr_end=0.2), CPU)
    rates = []
    for fraction in (-0.5, 0.0, 0.5, 1.0, 3.0):  # clamped to the run: before it, the start; after, the end
        algo.set_progress(fraction)
        rates.append(algo.policy_opt.param_groups[0]["lr"])
    np.testing.assert_allclose(rates, [1e-3, 1e-3, 6e-4, 2e-4, 2e-4])
    constant = BehaviourCloning(MLPChunkPolicy(2, 4, 1), quick_cfg(policy_lr=1e-3), CPU)
    constant.set_progress(0.9)
    assert constant.policy_opt.param_groups[0]["lr"] == pytest.approx(1e-3)


def bc_update(batch: dict, horizon: int) -> torch.Tensor:
    """A fresh (seeded) policy's parameters after one BC update group on ``batch``."""
    torch.manual_seed(0)
    policy = MLPChunkPolicy(2, horizon, 1)
    BehaviourCloning(policy, quick_cfg(), CPU).update_group(lambda: batch)
    return torch.cat([p.detach().flatten() for p in policy.parameters()])


def test_samples_the_replay_marks_not_for_the_actor_do_not_move_the_policy():
    buf = ChunkReplay(ReplaySpec(2, 1, 2, gamma=0.99), 256)
    for ep in range(4):
        buf.add(episode_batch("a", ep, range(8), end="terminated", action_dim=1, delay=-1))
    batch = buf.sample(32, np.random.default_rng(0))
    keep = np.arange(32) % 2 == 0
    batch[ACTOR_SAMPLE_KEY] = keep
    garbage = dict(batch)
    garbage[keys.ACTION] = np.where(keep[:, None, None], batch[keys.ACTION], 1e4).astype(np.float32)
    params = bc_update(batch, 2)
    torch.testing.assert_close(bc_update(garbage, 2), params)
    unmarked = dict(garbage)
    del unmarked[ACTOR_SAMPLE_KEY]
    assert not torch.allclose(bc_update(unmarked, 2), params)


def test_rows_outside_the_policy_mask_do_not_move_the_policy():
    """The actor learns a chunk start's own rows only; the rows after the next hand-over may hold
    anything (here: garbage) without changing the update."""
    buf = ChunkReplay(ReplaySpec(2, 1, 4, gamma=0.99), 256)
    for ep in range(4):
        buf.add(episode_batch("a", ep, range(8), end="terminated", action_dim=1, delay=-1))
    batch = buf.sample(32, np.random.default_rng(0))
    own = np.arange(4) < 2
    batch[POLICY_MASK_KEY] = batch[POLICY_MASK_KEY] & own
    garbage = dict(batch)
    garbage[keys.ACTION] = np.where(own[None, :, None], batch[keys.ACTION], 1e4).astype(np.float32)
    torch.testing.assert_close(bc_update(garbage, 4), bc_update(batch, 4))


def test_the_mc_advantage_is_the_return_to_go_minus_v_where_the_episode_ended():
    horizon = 4
    spec = ReplaySpec(state_dim=2, action_dim=1, horizon=horizon, gamma=0.9)
    buf = ChunkReplay(spec, 256)
    rewards = np.zeros(8)
    rewards[-1] = 1.0
    buf.add(episode_batch("a", 1, range(8), end="terminated", rewards=rewards, action_dim=1))
    buf.add(episode_batch("a", 2, range(8), action_dim=1))  # still running: no return yet
    batch = to_torch(buf.sample(64, np.random.default_rng(0)), CPU)
    to_go = batch[RETURN_TO_GO_KEY]
    assert torch.isnan(to_go).any() and not torch.isnan(to_go).all()
    td = RAPI(MLPChunkPolicy(2, horizon, 1), quick_cfg(), CPU, 2, {})
    mc = RAPI(MLPChunkPolicy(2, horizon, 1), quick_cfg(advantage=AdvantageKind.mc), CPU, 2, {})
    mc.target.load_state_dict(td.target.state_dict())
    _, adv_td = td.advantage_weights(batch)
    w, adv_mc = mc.advantage_weights(batch)
    with torch.no_grad():
        _, _, v = td.target(batch)
    ended = ~torch.isnan(to_go)
    torch.testing.assert_close(adv_mc[ended], to_go[ended] - v[ended].float())
    torch.testing.assert_close(adv_mc[~ended], adv_td[~ended])
    assert torch.isfinite(w).all()


def test_the_learner_publishes_the_policys_weight_average_and_keeps_training_the_last_iterate():
    buf = two_mode_replay(4)
    batch = buf.sample(64, np.random.default_rng(3))
    torch.manual_seed(0)
    policy = MLPChunkPolicy(2, 4, 1)
    start = {n: p.detach().clone() for n, p in policy.named_parameters()}
    bc = BehaviourCloning(policy, quick_cfg(policy_ema=0.5, actor_updates_per_group=1), CPU)
    bc.update_group(lambda: batch)
    live = {n: p.detach().clone() for n, p in policy.named_parameters()}
    published = bc.policy_weights()
    for name, value in published.items():  # one update: the average is halfway from the start
        np.testing.assert_allclose(value, (0.5 * (start[name] + live[name])).numpy(), rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(dict(policy.named_parameters())[name].detach(), live[name])
    assert any(not np.allclose(published[n], live[n].numpy()) for n in published)
    # A restarted learner resumes the average, not the last iterate.
    state = bc.state_dict()
    torch.manual_seed(1)
    resumed = BehaviourCloning(MLPChunkPolicy(2, 4, 1), quick_cfg(policy_ema=0.5), CPU)
    resumed.load_state_dict(state)
    for name, value in resumed.policy_weights().items():
        np.testing.assert_array_equal(value, published[name])
