"""The learner loop end to end in one process: in-process links, real buffers, RAPI, checkpoints."""

from __future__ import annotations

import json
import logging
import threading

import numpy as np
import pytest
from learner_doubles import MLPChunkPolicy, episode_batch, small_learner_config, toy_spec

from robotrl.config.learner import AlgorithmKind, RapiConfig
from robotrl.config.schema import RobotRLConfig
from robotrl.core.protocols import BatchReceiver
from robotrl.core.run_folder import LEARNER_METRICS
from robotrl.learner.main import build_learner, replay_spec
from robotrl.learner.samples import VERSION_KEY
from robotrl.transport.inproc import QueueLink, TransitionQueue

CAMS = {"front": (16, 16, 3)}
SPEC = toy_spec(CAMS)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def config(tmp_path, **learner: object) -> RobotRLConfig:
    rapi = RapiConfig(critic_hidden=32, critic_updates_per_group=2, critic_warmup_updates=0)
    logged_often = {"online_capacity": 2000, "log_every_groups": 1, "checkpoint_every_groups": 2}
    return small_learner_config(str(tmp_path / "run"), rapi, **(logged_often | learner))


def episodes(first: int, count: int, version: int = 0) -> list:
    out = []
    for ep in range(first, first + count):
        rewards = np.zeros(10)
        rewards[-1] = float(ep % 2)
        out.append(
            episode_batch(
                "actor-0", ep, range(10), end="terminated", rewards=rewards, cameras=CAMS, version=version
            )
        )
    return out


def test_loop_ingests_updates_publishes_rising_versions_and_resumes_from_its_checkpoint(tmp_path):
    cfg = config(tmp_path)
    inbox, outbox = TransitionQueue(), QueueLink()
    for b in episodes(0, 6):
        inbox.send(b)
    learner = build_learner(cfg, MLPChunkPolicy(2, 4, 3), SPEC, inbox, outbox, console=False)
    counters = learner.run(max_groups=4)
    updates = outbox.drain()
    assert [u.policy_version for u in updates] == [1, 2, 3, 4]
    assert all(u.digest_matches() and u.subset == "trainable" for u in updates)
    assert counters.groups == 4 and counters.policy_version == 4 and counters.transitions > 0
    assert learner.feeder.successes_kept >= 1  # odd episodes succeed: the anchor gets them
    lines = [json.loads(x) for x in (tmp_path / "run" / LEARNER_METRICS).read_text().splitlines()]
    assert [x["group"] for x in lines] == [1, 2, 3, 4] and "q_loss" in lines[-1] and "lag_mean" in lines[-1]
    saved = learner.algorithm.state_dict()["counters"]
    learner.online.close()
    learner.anchor.close()

    # A new process: same run_dir. Counters, networks and the weight version continue.
    inbox2, outbox2 = TransitionQueue(), QueueLink()
    for b in episodes(10, 3):
        inbox2.send(b)
    resumed = build_learner(cfg, MLPChunkPolicy(2, 4, 3), SPEC, inbox2, outbox2, console=False)
    assert resumed.counters.groups == 4 and resumed.counters.policy_version == 4
    assert resumed.counters.transitions == counters.transitions
    assert resumed.algorithm.state_dict()["counters"] == saved
    resumed.run(max_groups=2)
    again = outbox2.drain()
    assert [u.policy_version for u in again] == [5, 6, 7]  # re-announced as 5, never a reused version
    for name, tensor in updates[-1].tensors.items():
        np.testing.assert_array_equal(again[0].tensors[name], tensor)
    assert resumed.counters.groups == 6 and resumed.counters.policy_version == 7
    resumed.online.close()
    resumed.anchor.close()


def test_a_learner_resumed_from_an_older_checkpoint_numbers_above_every_version_it_published(tmp_path):
    # Killed after publishing v3 and v4 past its last checkpoint (v2): its actors run v4.
    cfg = config(tmp_path)
    inbox, outbox = TransitionQueue(), QueueLink()
    for b in episodes(0, 6):
        inbox.send(b)
    learner = build_learner(cfg, MLPChunkPolicy(2, 4, 3), SPEC, inbox, outbox, console=False)
    learner.run(max_groups=2)
    learner.publish()
    learner.publish()
    assert [u.policy_version for u in outbox.drain()] == [1, 2, 3, 4]
    learner.online.close()
    learner.anchor.close()

    inbox2, outbox2 = TransitionQueue(), QueueLink()
    resumed = build_learner(cfg, MLPChunkPolicy(2, 4, 3), SPEC, inbox2, outbox2, console=False)
    assert resumed.counters.groups == 2 and resumed.counters.policy_version == 4
    inbox2.send(episodes(6, 1, version=4)[0])  # what the actors sent while running v4: still taken
    assert resumed.ingest_next(10.0) and resumed.admission is not None and not resumed.admission.refused
    resumed.online.close()
    resumed.anchor.close()


def test_a_learner_killed_before_its_first_checkpoint_numbers_above_what_it_published(tmp_path):
    # Killed after publishing v1 and v2 with no checkpoint yet: its actors run v2, and the rows
    # they send next report v2. The restarted learner must not count from 0 and refuse them.
    cfg = config(tmp_path, checkpoint_every_groups=1000)
    first = build_learner(cfg, MLPChunkPolicy(2, 4, 3), SPEC, TransitionQueue(), QueueLink(), console=False)
    first.publish()
    first.publish()
    first.online.close()
    first.anchor.close()

    inbox, outbox = TransitionQueue(), QueueLink()
    second = build_learner(cfg, MLPChunkPolicy(2, 4, 3), SPEC, inbox, outbox, console=False)
    assert second.counters.groups == 0 and second.counters.policy_version == 2
    second.stop()
    second.run()  # resuming, it first publishes the policy it starts from, as v3
    assert [u.policy_version for u in outbox.drain()] == [3]
    inbox.send(episodes(0, 1, version=2)[0])
    assert second.ingest_next(10.0) and second.admission is not None and not second.admission.refused
    second.online.close()
    second.anchor.close()
    # Not resuming its training (learner.resume=false), it still numbers above what was published.
    fresh_cfg = config(tmp_path, checkpoint_every_groups=1000, resume=False)
    fresh = build_learner(
        fresh_cfg, MLPChunkPolicy(2, 4, 3), SPEC, TransitionQueue(), QueueLink(), console=False
    )
    assert fresh.counters.policy_version == 3
    fresh.online.close()
    fresh.anchor.close()


def test_a_learner_without_checkpoint_numbers_its_versions_above_those_its_actors_report(tmp_path, caplog):
    # Restarted without its checkpoint, the learner counts from 0 while its actors run its predecessor's v7.
    caplog.set_level(logging.INFO, logger="robotrl.learner.loop")
    inbox, outbox = TransitionQueue(), QueueLink()
    for b in episodes(0, 6, version=7):
        inbox.send(b)
    learner = build_learner(config(tmp_path), MLPChunkPolicy(2, 4, 3), SPEC, inbox, outbox, console=False)
    assert learner.counters.policy_version == 0
    learner.run(max_groups=2)
    assert [u.policy_version for u in outbox.drain()] == [8, 9]  # not 1, 2: below what the actors ran
    assert "policy versions continue above v7, the newest actor actor-0 reports" in caplog.text
    # Once it has published, the versions are its own: a batch reporting more no longer moves them.
    inbox.send(episodes(6, 1, version=50)[0])
    assert learner.ingest_next(10.0) and learner.counters.policy_version == 9
    learner.online.close()
    learner.anchor.close()


def test_bad_batch_is_refused_counted_and_the_loop_keeps_going(tmp_path):
    cfg = config(tmp_path, algorithm=AlgorithmKind.bc)
    inbox, outbox = TransitionQueue(), QueueLink()
    inbox.send(episode_batch("actor-0", 0, range(10), end="terminated", cameras={"front": (8, 8, 3)}))
    for b in episodes(1, 4):
        inbox.send(b)
    learner = build_learner(cfg, MLPChunkPolicy(2, 4, 3), SPEC, inbox, outbox, console=False)
    learner.run(max_groups=2)
    assert learner.refused_batches == 1 and learner.online.refused_batches == 1
    assert [u.policy_version for u in outbox.drain()] == [1, 2]
    learner.online.close()


def test_batches_mix_anchor_and_online_and_respect_the_lag_cap(tmp_path):
    cfg = config(tmp_path, anchor_fraction=0.5, max_policy_lag=2, batch_size=64)
    learner = build_learner(cfg, MLPChunkPolicy(2, 4, 3), SPEC, TransitionQueue(), QueueLink(), console=False)
    for ep, version in enumerate((1, 4, 4, 1)):
        learner.ingest(
            episode_batch("actor-0", ep, range(10), end="terminated", cameras=CAMS, version=version)
        )
    flags = np.ones(10, bool)
    learner.ingest(
        episode_batch("actor-1", 7, range(10), end="truncated", cameras=CAMS, intervention=flags, version=1)
    )
    learner.counters.policy_version = 5
    batch = learner.next_batch()
    versions = batch[VERSION_KEY]
    online, anchor = versions[:32], versions[32:]
    assert set(online.tolist()) == {4}  # version 1 is 4 behind: over the cap
    assert (anchor == 1).all()  # the intervention segment is anchor data, kept whatever its age
    assert learner._lag_max == 1
    learner.online.close()
    learner.anchor.close()


def test_buffers_survive_a_restart_when_enabled(tmp_path):
    cfg = config(tmp_path, save_buffers=True)
    inbox = TransitionQueue()
    for b in episodes(0, 4):
        inbox.send(b)
    first = build_learner(cfg, MLPChunkPolicy(2, 4, 3), SPEC, inbox, QueueLink(), console=False)
    first.run(max_groups=2)
    ready = (len(first.online), len(first.anchor))
    assert ready[0] > 0 and ready[1] > 0
    second = build_learner(cfg, MLPChunkPolicy(2, 4, 3), SPEC, TransitionQueue(), QueueLink(), console=False)
    assert (len(second.online), len(second.anchor)) == ready
    assert second.anchor.successes.lengths() == first.anchor.successes.lengths()
    for learner in (first, second):
        learner.online.close()
        learner.anchor.close()


def test_a_learner_stopped_before_any_group_checkpoints_what_it_journaled(tmp_path):
    # A restarted learner stopped again before its first group: the batches it acknowledged are
    # only in its journal, and its stop must checkpoint them (a resumed run then holds them).
    cfg = config(tmp_path)
    inbox = TransitionQueue()
    for b in episodes(0, 2):
        inbox.send(b)
    first = build_learner(cfg, MLPChunkPolicy(2, 4, 3), SPEC, inbox, QueueLink(), console=False)
    while first.ingest_next(0.1):
        pass
    assert first.journal is not None and len(first.journal.files()) == 2
    first.stop()
    first.run()
    assert first.counters.groups == 0 and first.journal.files() == []
    second = build_learner(cfg, MLPChunkPolicy(2, 4, 3), SPEC, TransitionQueue(), QueueLink(), console=False)
    assert len(second.online) == len(first.online) == 20
    for learner in (first, second):
        learner.online.close()
        learner.anchor.close()


def test_rate_limit_pauses_updates_until_more_transitions_arrive(tmp_path):
    # 2 critic + 1 actor updates of 16 samples: 48 samples per group; 40 transitions allow 60.
    cfg = config(tmp_path, max_samples_per_insert=1.5)
    inbox = TransitionQueue()
    learner = build_learner(cfg, MLPChunkPolicy(2, 4, 3), SPEC, inbox, QueueLink(), console=False)
    for b in episodes(0, 4):  # 40 transitions, stored before the loop starts
        learner.ingest(b)
    runner = threading.Thread(target=learner.run, kwargs={"max_groups": 4})
    runner.start()
    try:
        assert learner.throttled.wait(timeout=30), "the rate limit never paused the updates"
        assert learner.counters.groups == 2  # 0 < 60 and 48 < 60 ran; 96 >= 60 waits
        for b in episodes(4, 8):
            inbox.send(b)
        runner.join(timeout=60)
        assert not runner.is_alive() and learner.counters.groups == 4
    finally:
        learner.stop()
        runner.join(timeout=10)
        learner.online.close()
        learner.anchor.close()


def test_prefetched_batches_train_the_same_loop(tmp_path):
    cfg = config(tmp_path, prefetch_batches=2)
    inbox, outbox = TransitionQueue(), QueueLink()
    for b in episodes(0, 4):
        inbox.send(b)
    learner = build_learner(cfg, MLPChunkPolicy(2, 4, 3), SPEC, inbox, outbox, console=False)
    assert learner.prefetch == 2
    learner.run(max_groups=3)
    assert [u.policy_version for u in outbox.drain()] == [1, 2, 3]
    assert not any(t.name == "prefetch" and t.is_alive() for t in threading.enumerate())
    learner.online.close()
    learner.anchor.close()


def test_demonstration_prefixes_follow_the_policys_trained_max_delay():
    """A checkpoint trained to continue prefixes up to 5 gets demonstration windows with prefixes
    up to 5, whatever policy.max_delay says; without one, policy.max_delay (below the horizon)."""
    cfg = RobotRLConfig()
    cfg.policy.max_delay = 12
    assert replay_spec(cfg, SPEC, 32, max_delay=5).max_delay == 5
    assert replay_spec(cfg, SPEC, 32).max_delay == 12
    assert replay_spec(cfg, SPEC, 8).max_delay == 7


@pytest.mark.parametrize("algorithm", [AlgorithmKind.rapi, AlgorithmKind.bc])
def test_the_policys_learning_rate_anneals_over_the_runs_group_budget(tmp_path, algorithm):
    cfg = config(tmp_path, algorithm=algorithm, policy_lr=1e-3, policy_lr_end=0.1, max_groups=4)
    inbox, outbox = TransitionQueue(), QueueLink()
    for b in episodes(0, 6):
        inbox.send(b)
    learner = build_learner(cfg, MLPChunkPolicy(2, 4, 3), SPEC, inbox, outbox, console=False)
    learner.run(max_groups=4)
    lines = [json.loads(x) for x in (tmp_path / "run" / LEARNER_METRICS).read_text().splitlines()]
    # before group g of 4: 1e-3 x (0.1 + 0.9 x half cosine of g / 4)
    expected = [1e-3 * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * g / 4))) for g in range(4)]
    np.testing.assert_allclose([x["policy_lr"] for x in lines], expected, rtol=1e-6)
    assert learner.algorithm.policy_opt.param_groups[0]["lr"] == pytest.approx(expected[-1])
    learner.online.close()
    learner.anchor.close()


def test_in_process_transitions_are_numbered_per_actor_in_one_stream():
    inbox = TransitionQueue()
    assert isinstance(inbox, BatchReceiver) and inbox.ledger is None
    for actor, episode in (("a", 0), ("b", 1), ("a", 2)):
        inbox.send(episode_batch(actor, episode, range(3)))
    items = [inbox.recv_item(0.1) for _ in range(3)]
    assert [(i.actor_id, i.seq) for i in items if i is not None] == [("a", 0), ("b", 0), ("a", 1)]
    assert {i.stream for i in items if i is not None} == {inbox.stream}
    assert inbox.recv_item(0.0) is None
