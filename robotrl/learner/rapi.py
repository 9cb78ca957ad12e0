"""Replay-anchored policy improvement (RAPI): an in-sample critic and an advantage-weighted actor.

After the asynchronous replay-anchored post-training of RAPolicy (docs/methods.md, "RAPI"):

- Critic (IQL-style, never queries the current policy): two chunk-level Q networks
  regress ``y = R + gamma^m (1 - done) V_target(s')`` on the executed chunk; V is
  fit by expectile regression (tau 0.7) to the min of the target Qs. The Q and V
  heads share one observation encoder (one image pass per batch); the target
  critic moves by Polyak averaging.
- Actor: the policy's own per-sample supervised loss, weighted per sample by
  ``w = exp(clip(A / beta, -c, c))`` with ``A = min Q(s, a) - V(s)`` from the target critic
  (a weighted mean over the batch). With ``learner.rapi.advantage=mc``, ``A = G - V(s)`` where
  the sample's return to go ``G`` is known (its episode ended). With ``learner.rapi.weight_ess``
  set, beta is chosen per batch so the weights' effective share of the batch is that number
  (a fixed budget for how far the weights move from imitation, as MPO's KL bound on its
  sample weights): a fixed beta's share drifts with the advantages' scale (0.13-0.7 in the
  demo). The policy is given the committed prefix; its loss covers only the continuation.
- Schedule: an update group is ``critic_updates_per_group`` critic updates, then
  ``actor_updates_per_group`` actor updates once the critic has had
  ``critic_warmup_updates``; the loop publishes weights after a group that
  changed the policy.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from robotrl.config.learner import AdvantageKind, LearnerConfig
from robotrl.core import keys
from robotrl.learner import samples
from robotrl.learner.distributed import SINGLE, Ranks, optimizer_state_like, sharded_like
from robotrl.learner.nets import Critic
from robotrl.learner.torch_utils import autocast, to_torch
from robotrl.policy.augment import shift_batch_images
from robotrl.policy.average import WeightAverage

NextBatch = Callable[[], Mapping[str, Any]]


def expectile_loss(diff: torch.Tensor, tau: float) -> torch.Tensor:
    """Asymmetric squared loss: over-estimates (diff < 0) weigh 1 - tau, under-estimates tau."""
    weight = torch.where(diff < 0, 1.0 - tau, tau)
    return (weight * diff.pow(2)).mean()


def effective_share(weights: torch.Tensor) -> float:
    """Kish's effective sample size of ``weights`` as a share of their count: 1 when they are
    uniform (BC), 1/n when one sample takes all. A small share means the actor learns from a few
    samples of each batch: a low beta trades imitation's sample efficiency for selectivity."""
    n = weights.numel()
    if n == 0:
        return 0.0
    w = weights.float()
    return float(w.sum().square() / w.square().sum().clamp_min(1e-30) / n)


def temperature_for_share(adv: torch.Tensor, share: float, clip: float, iters: int = 40) -> float:
    """The beta whose weights ``exp(clip(adv / beta, -clip, clip))`` have effective share ``share``
    (bisection in log beta: the share rises with beta, to 1 as the weights flatten). Where even
    beta 1e-6 leaves the share above ``share`` (the clip's floor: every weight is e^c or e^-c), that
    beta: the weights are as selective as the clip lets them be."""

    def share_at(log_beta: float) -> float:
        return effective_share(torch.exp(torch.clamp(adv / 10**log_beta, -clip, clip)))

    lo, hi = -6.0, 3.0  # log10 beta
    if adv.numel() < 2:
        return float(10**hi)  # nothing to choose between
    if share_at(lo) >= share:
        return float(10**lo)
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if share_at(mid) < share else (lo, mid)
    return float(10**hi)


def polyak(target: nn.Module, source: nn.Module, tau: float) -> None:
    with torch.no_grad():
        for t, s in zip(target.parameters(), source.parameters(), strict=True):
            t.lerp_(s, tau)


class PerSampleLoss(nn.Module):
    """A policy's ``per_sample_loss`` as a module's forward: DDP averages the gradients of what
    runs through a module's forward, and a policy's loss is not its forward."""

    def __init__(self, policy: nn.Module) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, batch: Mapping[str, Any]) -> torch.Tensor:
        loss: torch.Tensor = self.policy.per_sample_loss(batch)  # type: ignore[operator]
        return loss


class PolicyTrainer:
    """What RAPI and BC share: the policy, its optimiser, its weight average (``policy_ema``),
    batch transfer, the update count, and the ranks it trains on (each update's batch is this
    rank's shard; losses and gradients are the whole batch's)."""

    def __init__(self, policy: Any, cfg: LearnerConfig, device: torch.device, ranks: Ranks = SINGLE) -> None:
        self.policy, self.cfg, self.device, self.ranks = policy, cfg, device, ranks
        prepare = getattr(policy, "prepare_training", None)  # a lerobot policy's processors, too
        if callable(prepare):
            prepare(device)
        else:
            policy.to(device)
        self.policy_loss = ranks.wrap_policy(PerSampleLoss(policy))
        # After wrapping: sharding replaces the parameters with their slices.
        self.policy_params = [p for p in policy.parameters() if p.requires_grad]
        self.policy_lr = cfg.policy_lr or cfg.lr
        """The policy's learning rate now (``set_progress`` anneals it)."""
        self.policy_opt = torch.optim.Adam(self.policy_params, lr=self.policy_lr)
        self.policy_average = (
            WeightAverage(self.policy_params, cfg.policy_ema) if cfg.policy_ema > 0 else None
        )
        self.actor_updates = 0

    def set_progress(self, fraction: float) -> None:
        """Anneal the policy's learning rate from ``policy_lr`` to ``policy_lr x policy_lr_end``
        along a half cosine over the run's budget."""
        end = self.cfg.policy_lr_end
        cosine = 0.5 * (1 + math.cos(math.pi * min(max(fraction, 0.0), 1.0)))
        self.policy_lr = (self.cfg.policy_lr or self.cfg.lr) * (end + (1 - end) * cosine)
        for group in self.policy_opt.param_groups:
            group["lr"] = self.policy_lr

    def _batch(self, next_batch: NextBatch) -> dict[str, Any]:
        """The next training batch on the device, its camera images randomly shifted
        (``learner.image_shift``): the critic and the policy read the same shifted images."""
        return shift_batch_images(to_torch(next_batch(), self.device), self.cfg.image_shift)

    def _policy_step(self, batch: Mapping[str, Any], weights: torch.Tensor | None) -> float:
        self.policy.train()
        # The actor learns a chunk's own rows (see samples.POLICY_MASK_KEY).
        if samples.POLICY_MASK_KEY in batch:
            batch = {**batch, keys.ACTION_MASK: batch[samples.POLICY_MASK_KEY]}
        with autocast(self.device):
            per_sample = self.policy_loss(batch).float()
        # Weights are self-normalised (a weighted mean): they choose which samples to imitate, not
        # how far to step, so RAPI's step size is BC's and a batch of large weights cannot blow it up.
        # Only chunk-start and demonstration windows teach the actor (see samples.ACTOR_SAMPLE_KEY).
        w = torch.ones_like(per_sample) if weights is None else weights
        if samples.ACTOR_SAMPLE_KEY in batch:
            w = w * batch[samples.ACTOR_SAMPLE_KEY].to(w.device, w.dtype)
        # Over ranks: the whole batch's weighted mean, which DDP's averaging of the ranks' gradients
        # gives when each rank divides by the whole batch's weight and multiplies by the ranks.
        loss = (per_sample * w).sum() / self.ranks.sum(w.sum()).clamp_min(1e-12)
        if self.ranks.parallel:
            loss = loss * self.ranks.world
        self.policy_opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.policy_params, self.cfg.grad_clip)
        self.policy_opt.step()
        if self.policy_average is not None:
            self.policy_average.update()
        self.actor_updates += 1
        return float(per_sample.mean().detach())

    def policy_weights(self) -> Mapping[str, npt.NDArray[np.generic]]:
        """What the learner publishes and checkpoints: the weight average when there is one."""
        average = (
            self.policy_average.swapped_in() if self.policy_average is not None else contextlib.nullcontext()
        )
        with average, self.ranks.unsharded(self.policy_loss):
            weights: Mapping[str, npt.NDArray[np.generic]] = self.policy.trainable_tensors()
        return weights

    def policy_state(self) -> dict[str, Any]:
        """The policy's part of a checkpoint (the algorithm adds its own)."""
        return {
            "policy": self.policy.state_dict(),
            "policy_opt": self.policy_opt.state_dict(),
            "policy_average": None if self.policy_average is None else self.policy_average.values,
        }

    def load_policy_state(self, state: Mapping[str, Any]) -> None:
        """Load a state from :meth:`policy_state`; a sharded policy's whole tensors (from a
        checkpoint or rank 0) are cut to this rank's slices."""
        live = self.policy.state_dict()
        self.policy.load_state_dict({k: sharded_like(v, live.get(k, v)) for k, v in state["policy"].items()})
        self.policy_opt.load_state_dict(optimizer_state_like(state["policy_opt"], self.policy_params))
        saved = state.get("policy_average")
        if self.policy_average is not None:
            # A checkpoint from before the average was turned on starts it at its weights.
            source = saved if saved is not None else self.policy_params
            self.policy_average.load(
                [sharded_like(v, p) for v, p in zip(source, self.policy_params, strict=True)]
            )


class RAPI(PolicyTrainer):
    """The default :class:`~robotrl.core.protocols.Algorithm`."""

    def __init__(
        self,
        policy: Any,
        cfg: LearnerConfig,
        device: torch.device,
        state_dim: int,
        cameras: Mapping[str, tuple[int, int, int]],
        ranks: Ranks = SINGLE,
    ) -> None:
        super().__init__(policy, cfg, device, ranks)
        horizon, action_dim = int(policy.horizon), int(policy.action_dim)
        cams = dict(cameras) if cfg.rapi.critic_images else {}
        self.critic = Critic(state_dim, cams, horizon, action_dim, cfg.rapi.critic_hidden)
        normalization = getattr(policy, "normalization", None)
        if callable(normalization):
            self.critic.set_normalization(normalization())
        self.critic.to(device)
        self.critic_train = ranks.wrap(self.critic)  # over ranks: rank 0's critic, which the target copies
        self.target = copy.deepcopy(self.critic).requires_grad_(False)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=cfg.lr)
        self.critic_updates = 0
        self.last_beta = cfg.rapi.beta
        """The advantage temperature of the latest actor update (chosen per batch with weight_ess)."""

    def _target_values(self, batch: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """(min target Q of (s, a), target V of s'), from one target encoder pass over s and s'."""
        b = len(batch[keys.STATE])
        both = {key: torch.cat([batch[key], batch[samples.NEXT_PREFIX + key]]) for key in self._obs_keys}
        feat = self.target.encoder(both)
        q1, q2 = self.target.q(feat[:b], batch)
        return torch.minimum(q1, q2).float(), self.target.value(feat[b:]).float()

    @property
    def _obs_keys(self) -> list[str]:
        return [keys.STATE, *(keys.IMAGE_PREFIX + cam for cam in self.target.encoder.cameras)]

    def critic_step(self, batch: Mapping[str, Any]) -> dict[str, float]:
        cfg = self.cfg
        with torch.no_grad(), autocast(self.device):
            q_min, v_next = self._target_values(batch)
            not_done = 1.0 - batch[samples.DONE_KEY].float()
            y = batch[samples.REWARD_KEY].float() + batch[samples.DISCOUNT_KEY].float() * not_done * v_next
        with autocast(self.device):
            q1, q2, v = self.critic_train(batch)
            q_loss = (q1.float() - y).pow(2).mean() + (q2.float() - y).pow(2).mean()
            v_loss = expectile_loss(q_min - v.float(), cfg.rapi.expectile)
        self.critic_opt.zero_grad(set_to_none=True)
        (q_loss + v_loss).backward()
        nn.utils.clip_grad_norm_(self.critic.parameters(), cfg.grad_clip)
        self.critic_opt.step()
        polyak(self.target, self.critic, cfg.rapi.target_tau)
        self.critic_updates += 1
        return {
            "q_loss": float(q_loss.detach()),
            "v_loss": float(v_loss.detach()),
            "q": float(q1.detach().mean()),
        }

    def advantage_weights(self, batch: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """(w, A) per sample: ``w = exp(clip(A / beta, -c, c))``, ``A = min Q - V`` (target critic),
        or ``G - V`` for the ``mc`` advantage where the return to go ``G`` is known."""
        with torch.no_grad(), autocast(self.device):
            q1, q2, v = self.target(batch)
            adv = (torch.minimum(q1, q2) - v).float()
        if self.cfg.rapi.advantage is AdvantageKind.mc and samples.RETURN_TO_GO_KEY in batch:
            to_go = batch[samples.RETURN_TO_GO_KEY].to(adv.device, torch.float32)
            adv = torch.where(torch.isnan(to_go), adv, to_go - v.float())
        c, beta = self.cfg.rapi.adv_clip, self.cfg.rapi.beta
        if self.cfg.rapi.weight_ess:  # chosen on the whole batch, every rank's shard
            taught = self.ranks.gather(self._taught(batch, adv))
            beta = temperature_for_share(self.ranks.gather(adv)[taught], self.cfg.rapi.weight_ess, c)
        self.last_beta = beta
        return torch.exp(torch.clamp(adv / beta, -c, c)), adv

    @staticmethod
    def _taught(batch: Mapping[str, Any], like: torch.Tensor) -> torch.Tensor:
        """bool (B,): the samples the actor learns from (see samples.ACTOR_SAMPLE_KEY)."""
        if samples.ACTOR_SAMPLE_KEY not in batch:
            return torch.ones_like(like, dtype=torch.bool)
        taught: torch.Tensor = batch[samples.ACTOR_SAMPLE_KEY].to(like.device).bool()
        return taught

    def actor_step(self, batch: Mapping[str, Any]) -> dict[str, float]:
        w, adv = self.advantage_weights(batch)
        loss = self._policy_step(batch, w)
        return {
            "policy_loss": loss,
            "adv": float(adv.mean()),
            "weight": float(w.mean()),
            "weight_ess": effective_share(w[self._taught(batch, w)]),
            "beta": self.last_beta,
            "policy_lr": self.policy_lr,
        }

    def update_group(self, next_batch: NextBatch) -> Mapping[str, float]:
        cfg = self.cfg
        logs: list[dict[str, float]] = []
        for _ in range(cfg.rapi.critic_updates_per_group):
            logs.append(self.critic_step(self._batch(next_batch)))
        actor_updates = 0
        if self.critic_updates >= cfg.rapi.critic_warmup_updates:
            for _ in range(cfg.actor_updates_per_group):
                logs.append(self.actor_step(self._batch(next_batch)))
                actor_updates += 1
        out = _mean_logs(logs)
        out.update(
            actor_updates=float(actor_updates),
            critic_updates_total=float(self.critic_updates),
            actor_updates_total=float(self.actor_updates),
        )
        return self.ranks.mean_metrics(out)

    def state_dict(self) -> dict[str, Any]:
        return {
            **self.policy_state(),
            "critic": self.critic.state_dict(),
            "critic_target": self.target.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "counters": {"critic_updates": self.critic_updates, "actor_updates": self.actor_updates},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.load_policy_state(state)
        self.critic.load_state_dict(state["critic"])
        self.target.load_state_dict(state["critic_target"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.critic_updates = int(state["counters"]["critic_updates"])
        self.actor_updates = int(state["counters"]["actor_updates"])


def _mean_logs(logs: list[dict[str, float]]) -> dict[str, float]:
    names = {k for log in logs for k in log}
    return {k: float(np.mean([log[k] for log in logs if k in log])) for k in sorted(names)}
