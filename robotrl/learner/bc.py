"""Anchored behaviour cloning: the policy's own supervised loss, every sample weighted 1.

The baseline RAPI is compared with. It reads the same 50:50 online/anchor batches
(``learner.anchor_fraction=1`` clones the anchor only), so it imitates whatever
the buffers hold, good and bad modes alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from robotrl.learner.rapi import NextBatch, PolicyTrainer


class BehaviourCloning(PolicyTrainer):
    """An :class:`~robotrl.core.protocols.Algorithm` with no critic."""

    def update_group(self, next_batch: NextBatch) -> Mapping[str, float]:
        n = max(self.cfg.actor_updates_per_group, 1)
        losses = [self._policy_step(self._batch(next_batch), None) for _ in range(n)]
        return self.ranks.mean_metrics(
            {
                "policy_loss": sum(losses) / n,
                "policy_lr": self.policy_lr,
                "actor_updates": float(n),
                "actor_updates_total": float(self.actor_updates),
            }
        )

    def state_dict(self) -> dict[str, Any]:
        return {**self.policy_state(), "counters": {"actor_updates": self.actor_updates}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.load_policy_state(state)
        self.actor_updates = int(state["counters"]["actor_updates"])
