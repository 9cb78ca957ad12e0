"""The learner keeps the policy it published every few update groups, for the learning curve."""

from __future__ import annotations

import numpy as np
import pytest
from learner_doubles import MLPChunkPolicy, episode_batch, small_learner_config, toy_spec
from safetensors.numpy import load_file

from robotrl.config.learner import RapiConfig
from robotrl.core.policy_snapshots import read_policy_snapshots
from robotrl.core.run_folder import POLICY_SNAPSHOTS, snapshot_weights_path
from robotrl.learner.main import build_learner
from robotrl.transport.inproc import QueueLink, TransitionQueue

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_snapshots_hold_the_weights_published_at_group_0_every_n_groups_and_the_last(tmp_path):
    rapi = RapiConfig(critic_hidden=32, critic_updates_per_group=2, critic_warmup_updates=0)
    # policy_ema: the published weights are the average, not the last iterate the policy holds
    cfg = small_learner_config(str(tmp_path / "run"), rapi, snapshot_every_groups=3, policy_ema=0.9)
    inbox, outbox = TransitionQueue(), QueueLink()
    for ep in range(6):
        rewards = np.zeros(10)
        rewards[-1] = float(ep % 2)
        inbox.send(episode_batch("actor-0", ep, range(10), end="terminated", rewards=rewards))
    policy = MLPChunkPolicy(2, 4, 3)
    start = policy.trainable_tensors()
    learner = build_learner(cfg, policy, toy_spec(), inbox, outbox, console=False)
    learner.run(max_groups=7)
    learner.online.close()
    learner.anchor.close()
    sent = {u.policy_version: u.tensors for u in outbox.drain()}
    assert sorted(sent) == list(range(1, 8))  # one version per group

    run = tmp_path / "run"
    snapshots = read_policy_snapshots(run)
    assert [(s.group, s.policy_version) for s in snapshots] == [(0, 0), (3, 3), (6, 6), (7, 7)]
    # the last is written once ingest stopped: it counts every transition the learner took
    assert snapshots[-1].transitions == learner.counters.transitions > 0
    assert snapshots[-1].elapsed_s >= snapshots[0].elapsed_s >= 0
    for snapshot in snapshots:
        kept = load_file(str(snapshot_weights_path(run, snapshot.group)))
        expected = start if snapshot.group == 0 else sent[snapshot.policy_version]
        assert kept.keys() == expected.keys()
        for name, tensor in expected.items():
            np.testing.assert_array_equal(kept[name], tensor, err_msg=f"group {snapshot.group}: {name}")
    # the average was published, and it differs from the policy's last iterate
    last_iterate = policy.trainable_tensors()
    assert any(not np.array_equal(last_iterate[k], sent[7][k]) for k in last_iterate)
    assert not list((run / POLICY_SNAPSHOTS).glob(".*"))  # no temporary file left


def test_no_snapshots_unless_asked_for(tmp_path):
    cfg = small_learner_config(str(tmp_path / "run"), RapiConfig(critic_warmup_updates=0))
    inbox, outbox = TransitionQueue(), QueueLink()
    for ep in range(4):
        inbox.send(episode_batch("actor-0", ep, range(10), end="terminated", rewards=np.ones(10)))
    learner = build_learner(cfg, MLPChunkPolicy(2, 4, 3), toy_spec(), inbox, outbox, console=False)
    learner.run(max_groups=2)
    learner.online.close()
    learner.anchor.close()
    assert len(outbox.drain()) == 2 and not (tmp_path / "run" / POLICY_SNAPSHOTS).exists()
