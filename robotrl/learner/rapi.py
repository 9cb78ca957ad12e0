"""Replay-anchored policy improvement (RAPI): an in-sample critic and an advantage-weighted actor.

After the asynchronous replay-anchored post-training of RAPolicy (see REFERENCE.md):

- Critic (IQL-style, never queries the current policy): two chunk-level Q networks
  regress ``y = R + gamma^m (1 - done) V_target(s')`` on the executed chunk; V is
  fit by expectile regression (tau 0.7) to the min of the target Qs. Target
  networks move by Polyak averaging.
- Actor: the policy's own per-sample supervised loss, weighted per sample by
  ``w = exp(clip(A / beta, -c, c))`` with ``A = min Q_target(s, a) - V(s)``. The
  policy is given the committed prefix; its loss covers only the continuation.
- Schedule: an update group is ``critic_updates_per_group`` critic updates, then
  ``actor_updates_per_group`` actor updates once the critic has had
  ``critic_warmup_updates``; the loop publishes weights after a group that
  changed the policy.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from robotrl.config.schema import LearnerConfig
from robotrl.learner.nets import TwinQ, ValueNet
from robotrl.learner.replay import DISCOUNT_KEY, DONE_KEY, NEXT_PREFIX, REWARD_KEY
from robotrl.learner.torch_utils import autocast, to_torch

NextBatch = Callable[[], Mapping[str, Any]]


def expectile_loss(diff: torch.Tensor, tau: float) -> torch.Tensor:
    """Asymmetric squared loss: over-estimates (diff < 0) weigh 1 - tau, under-estimates tau."""
    weight = torch.where(diff < 0, 1.0 - tau, tau)
    return (weight * diff.pow(2)).mean()


def polyak(target: nn.Module, source: nn.Module, tau: float) -> None:
    with torch.no_grad():
        for t, s in zip(target.parameters(), source.parameters(), strict=True):
            t.lerp_(s, tau)


class PolicyTrainer:
    """What RAPI and BC share: the policy, its optimiser, batch transfer and the update count."""

    def __init__(self, policy: Any, cfg: LearnerConfig, device: torch.device) -> None:
        self.policy, self.cfg, self.device = policy, cfg, device
        policy.to(device)
        self.policy_params = [p for p in policy.parameters() if p.requires_grad]
        self.policy_opt = torch.optim.Adam(self.policy_params, lr=cfg.lr)
        self.actor_updates = 0

    def _batch(self, next_batch: NextBatch) -> dict[str, Any]:
        return to_torch(next_batch(), self.device)

    def _policy_step(self, batch: Mapping[str, Any], weights: torch.Tensor | None) -> float:
        self.policy.train()
        with autocast(self.device):
            per_sample = self.policy.per_sample_loss(batch).float()
        loss = (per_sample * weights).mean() if weights is not None else per_sample.mean()
        self.policy_opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.policy_params, self.cfg.grad_clip)
        self.policy_opt.step()
        self.actor_updates += 1
        return float(per_sample.mean().detach())

    def policy_weights(self) -> Mapping[str, npt.NDArray[np.generic]]:
        weights: Mapping[str, npt.NDArray[np.generic]] = self.policy.trainable_tensors()
        return weights


class RAPI(PolicyTrainer):
    """The default :class:`~robotrl.core.protocols.Algorithm`."""

    def __init__(
        self,
        policy: Any,
        cfg: LearnerConfig,
        device: torch.device,
        state_dim: int,
        cameras: Sequence[str],
    ) -> None:
        super().__init__(policy, cfg, device)
        horizon, action_dim = int(policy.horizon), int(policy.action_dim)
        cams = list(cameras) if cfg.critic_images else []
        self.q = TwinQ(state_dim, cams, horizon, action_dim, cfg.critic_hidden).to(device)
        self.v = ValueNet(state_dim, cams, cfg.critic_hidden).to(device)
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.v_target = copy.deepcopy(self.v).requires_grad_(False)
        self.q_opt = torch.optim.Adam(self.q.parameters(), lr=cfg.lr)
        self.v_opt = torch.optim.Adam(self.v.parameters(), lr=cfg.lr)
        self.critic_updates = 0

    def critic_step(self, batch: Mapping[str, Any]) -> dict[str, float]:
        cfg = self.cfg
        with torch.no_grad(), autocast(self.device):
            v_next = self.v_target(batch, NEXT_PREFIX).float()
            not_done = 1.0 - batch[DONE_KEY].float()
            y = batch[REWARD_KEY].float() + batch[DISCOUNT_KEY].float() * not_done * v_next
            q_t1, q_t2 = self.q_target(batch)
            q_min = torch.minimum(q_t1, q_t2).float()
        with autocast(self.device):
            q1, q2 = self.q(batch)
            q_loss = (q1.float() - y).pow(2).mean() + (q2.float() - y).pow(2).mean()
            v = self.v(batch).float()
            v_loss = expectile_loss(q_min - v, cfg.expectile)
        self.q_opt.zero_grad(set_to_none=True)
        q_loss.backward()
        nn.utils.clip_grad_norm_(self.q.parameters(), cfg.grad_clip)
        self.q_opt.step()
        self.v_opt.zero_grad(set_to_none=True)
        v_loss.backward()  # type: ignore[no-untyped-call]
        nn.utils.clip_grad_norm_(self.v.parameters(), cfg.grad_clip)
        self.v_opt.step()
        polyak(self.q_target, self.q, cfg.target_tau)
        polyak(self.v_target, self.v, cfg.target_tau)
        self.critic_updates += 1
        return {
            "q_loss": float(q_loss.detach()),
            "v_loss": float(v_loss.detach()),
            "q": float(q1.detach().mean()),
        }

    def advantage_weights(self, batch: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """(w, A) per sample: ``w = exp(clip(A / beta, -c, c))``, ``A = min Q_target - V``."""
        with torch.no_grad(), autocast(self.device):
            q1, q2 = self.q_target(batch)
            adv = (torch.minimum(q1, q2) - self.v(batch)).float()
        c = self.cfg.adv_clip
        return torch.exp(torch.clamp(adv / self.cfg.beta, -c, c)), adv

    def actor_step(self, batch: Mapping[str, Any]) -> dict[str, float]:
        w, adv = self.advantage_weights(batch)
        loss = self._policy_step(batch, w)
        return {"policy_loss": loss, "adv": float(adv.mean()), "weight": float(w.mean())}

    def update_group(self, next_batch: NextBatch) -> Mapping[str, float]:
        cfg = self.cfg
        logs: list[dict[str, float]] = []
        for _ in range(cfg.critic_updates_per_group):
            logs.append(self.critic_step(self._batch(next_batch)))
        actor_updates = 0
        if self.critic_updates >= cfg.critic_warmup_updates:
            for _ in range(cfg.actor_updates_per_group):
                logs.append(self.actor_step(self._batch(next_batch)))
                actor_updates += 1
        out = _mean_logs(logs)
        out.update(
            actor_updates=float(actor_updates),
            critic_updates_total=float(self.critic_updates),
            actor_updates_total=float(self.actor_updates),
        )
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy.state_dict(),
            "policy_opt": self.policy_opt.state_dict(),
            "q": self.q.state_dict(),
            "v": self.v.state_dict(),
            "q_target": self.q_target.state_dict(),
            "v_target": self.v_target.state_dict(),
            "q_opt": self.q_opt.state_dict(),
            "v_opt": self.v_opt.state_dict(),
            "counters": {"critic_updates": self.critic_updates, "actor_updates": self.actor_updates},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.policy_opt.load_state_dict(state["policy_opt"])
        for name in ("q", "v", "q_target", "v_target", "q_opt", "v_opt"):
            getattr(self, name).load_state_dict(state[name])
        self.critic_updates = int(state["counters"]["critic_updates"])
        self.actor_updates = int(state["counters"]["actor_updates"])


def _mean_logs(logs: list[dict[str, float]]) -> dict[str, float]:
    keys = {k for log in logs for k in log}
    return {k: float(np.mean([log[k] for log in logs if k in log])) for k in sorted(keys)}
