"""The learner refuses absurd values at ingest and survives a non-finite update: real RAPI on the tiny
policy, real checkpoints on disk, in-process links."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from learner_doubles import MLPChunkPolicy, episode_batch, small_learner_config, toy_spec

from robotrl.config.learner import GuardConfig, RapiConfig
from robotrl.config.schema import RobotRLConfig
from robotrl.core.run_folder import CHECKPOINT_STATE, CHECKPOINTS, LEARNER_METRICS
from robotrl.core.types import WeightUpdate
from robotrl.learner.checkpoint import Checkpointer
from robotrl.learner.guard import LearnerDivergedError, nonfinite_tensors
from robotrl.learner.loop import Learner
from robotrl.learner.main import build_learner
from robotrl.transport.inproc import QueueLink, TransitionQueue

SPEC = toy_spec()

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def config(tmp_path: Path, **learner: object) -> RobotRLConfig:
    rapi = RapiConfig(
        critic_hidden=32, critic_updates_per_group=2, critic_warmup_updates=0, critic_images=False
    )
    often = {"online_capacity": 2000, "log_every_groups": 1, "checkpoint_every_groups": 2}
    return small_learner_config(str(tmp_path / "run"), rapi, **(often | learner))


def good_episodes(actor_id: str, first: int, count: int) -> list[Any]:
    rewards = np.zeros(10)
    rewards[-1] = 1.0
    return [
        episode_batch(actor_id, ep, range(10), end="terminated", rewards=rewards)
        for ep in range(first, first + count)
    ]


def ingest_all(learner: Learner) -> None:
    """Receive every queued batch now, so what the updates draw from does not depend on timing."""
    while learner.ingest_next(0.1):
        pass


def metrics_lines(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (tmp_path / "run" / LEARNER_METRICS).read_text().splitlines()]


def finite_update(update: WeightUpdate) -> bool:
    return all(np.isfinite(t).all() for t in update.tensors.values())


def test_absurd_rewards_actions_and_versions_are_refused_per_actor_and_losses_stay_finite(tmp_path):
    cfg = config(tmp_path)
    inbox, outbox = TransitionQueue(), QueueLink[WeightUpdate]()
    for batch in good_episodes("actor-0", 0, 6):
        inbox.send(batch)
    poison = good_episodes("hostile", 20, 4)
    inbox.send(dataclasses.replace(poison[0], reward=np.full(10, 3e38, np.float32)))  # finite, absurd
    inbox.send(dataclasses.replace(poison[1], action=np.full((10, 3), 1e7, np.float32)))
    inbox.send(dataclasses.replace(poison[3], tick=np.arange(500, 510, dtype=np.int64)))  # past the limit
    learner = build_learner(cfg, MLPChunkPolicy(2, 4, 3), SPEC, inbox, outbox, console=False)
    ingest_all(learner)
    learner.run(max_groups=4)
    # Once the learner has published, a version above its newest is refused (before its first
    # publish, a learner adopts the versions its actors report: see the publisher-session tests).
    above = np.full(10, learner.newest_version() + 50, np.int64)
    inbox.send(dataclasses.replace(poison[2], policy_version=above))
    ingest_all(learner)
    lines = metrics_lines(tmp_path)
    assert len(lines) == 4 and all(math.isfinite(x["q_loss"]) and math.isfinite(x["v_loss"]) for x in lines)
    assert all(finite_update(u) for u in outbox.drain())
    assert learner.admission is not None
    assert dict(learner.admission.refused["hostile"]) == {
        "reward": 1,
        "action": 1,
        "policy_version": 1,
        "tick": 1,
    }
    assert "actor-0" not in learner.admission.refused
    assert lines[-1]["refused_reward"] == 1  # the metrics line of the last group, before the version batch
    assert learner.counters.transitions == 60  # the good actor's six episodes, nothing of the hostile one
    learner.online.close()
    learner.anchor.close()


class CorruptCritic:
    """A real optimiser hook: after the critic's ``first``-th step (and ``count`` steps from there),
    a critic weight is set to NaN, as an overflowing update leaves it."""

    def __init__(self, learner: Learner, first: int, count: int) -> None:
        self.algorithm: Any = learner.algorithm
        self.first, self.count, self.steps, self.corrupted = first, count, 0, 0
        self.algorithm.critic_opt.register_step_post_hook(self)

    def __call__(self, *_: object) -> None:
        self.steps += 1
        if self.first <= self.steps < self.first + self.count:
            with torch.no_grad():
                next(self.algorithm.critic.parameters()).fill_(float("nan"))
            self.corrupted += 1


def checkpoint_states(run_dir: Path) -> dict[str, dict[str, Any]]:
    return {
        p.name: torch.load(p / CHECKPOINT_STATE, map_location="cpu", weights_only=True)
        for p in sorted((run_dir / CHECKPOINTS).glob("group-*"))
    }


def test_a_nan_update_is_rolled_back_never_published_nor_checkpointed(tmp_path):
    cfg = config(tmp_path)
    inbox, outbox = TransitionQueue(), QueueLink[WeightUpdate]()
    for batch in good_episodes("actor-0", 0, 6):
        inbox.send(batch)
    learner = build_learner(cfg, MLPChunkPolicy(2, 4, 3), SPEC, inbox, outbox, console=False)
    ingest_all(learner)
    hook = CorruptCritic(learner, first=7, count=1)  # 2 critic steps a group: the 4th group's first
    learner.run(max_groups=6)
    assert hook.corrupted == 1
    updates = outbox.drain()
    assert all(finite_update(u) for u in updates)  # the weight sender never saw the NaN
    assert [u.policy_version for u in updates] == [1, 2, 3, 4, 5, 6]  # six good groups, the bad one retried
    assert learner.guard.nonfinite_groups == 1 and learner.counters.groups == 6
    lines = metrics_lines(tmp_path)
    assert all(math.isfinite(x["q_loss"]) for x in lines) and lines[-1]["nonfinite_groups"] == 1
    run_dir = tmp_path / "run"
    states = checkpoint_states(run_dir)
    assert states and all(not nonfinite_tensors(s) for s in states.values())  # nothing NaN in the rotation
    checkpoints = Checkpointer(run_dir)
    assert checkpoints.last_good() is not None and checkpoints.last_good() == checkpoints.latest()
    learner.online.close()
    learner.anchor.close()


def test_repeated_nan_updates_stop_the_learner_with_a_clear_error_and_keep_the_last_good_checkpoint(tmp_path):
    cfg = config(tmp_path, guard=GuardConfig(action_margin=1000.0, max_nonfinite_groups=3))
    inbox, outbox = TransitionQueue(), QueueLink[WeightUpdate]()
    for batch in good_episodes("actor-0", 0, 6):
        inbox.send(batch)
    learner = build_learner(cfg, MLPChunkPolicy(2, 4, 3), SPEC, inbox, outbox, console=False)
    ingest_all(learner)
    hook = CorruptCritic(learner, first=5, count=10_000)  # from the 3rd group on, every group
    with pytest.raises(LearnerDivergedError, match=r"learner\.guard\.max_nonfinite_groups=3"):
        learner.run(max_groups=20)
    assert learner.guard.consecutive == 3 and hook.corrupted > 0
    updates = outbox.drain()
    assert [u.policy_version for u in updates] == [1, 2] and all(finite_update(u) for u in updates)
    run_dir = tmp_path / "run"
    states = checkpoint_states(run_dir)
    assert len(states) == 1 and not nonfinite_tensors(next(iter(states.values())))
    good = Checkpointer(run_dir).last_good()
    assert good is not None and good.name in states
    assert not nonfinite_tensors(learner.algorithm.state_dict())  # rolled back, not left NaN
    learner.online.close()
    learner.anchor.close()


def test_a_resuming_learner_skips_a_non_finite_latest_checkpoint(tmp_path):
    cfg = config(tmp_path)
    inbox = TransitionQueue()
    for batch in good_episodes("actor-0", 0, 6):
        inbox.send(batch)
    first = build_learner(cfg, MLPChunkPolicy(2, 4, 3), SPEC, inbox, QueueLink(), console=False)
    ingest_all(first)
    first.run(max_groups=3)  # checkpoints after group 2 and, stopping, group 3
    first.online.close()
    first.anchor.close()
    run_dir = tmp_path / "run"
    checkpoints = Checkpointer(run_dir)
    latest = checkpoints.latest()
    assert latest is not None and latest.name.startswith("group-00000003")
    # What the old learner wrote: a NaN state as the latest checkpoint.
    state = torch.load(latest / CHECKPOINT_STATE, map_location="cpu", weights_only=True)
    next(iter(state["critic"].values())).fill_(float("nan"))
    torch.save(state, latest / CHECKPOINT_STATE)
    assert checkpoints.newest_finite() is not None and checkpoints.newest_finite() != latest
    resumed = build_learner(cfg, MLPChunkPolicy(2, 4, 3), SPEC, TransitionQueue(), QueueLink(), console=False)
    assert resumed.counters.groups == 2 and not nonfinite_tensors(resumed.algorithm.state_dict())
    resumed.online.close()
    resumed.anchor.close()
