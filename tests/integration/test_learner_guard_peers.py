"""Finding 2 across real processes and sockets: a peer's finite but absurd values reach the learner
over ZeroMQ, are acknowledged, refused and counted, and the learner's checkpointed state stays finite;
a `robotrl learner` whose updates keep turning non-finite stops with a non-zero exit and says why."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from fault_peers import TICKS
from learner_doubles import episode_batch
from learner_process import ROBOTRL, learner_running, shared_overrides
from transport_peers import HEARTBEAT_S, TIMEOUT_S
from waiting import wait_until

from robotrl.core.run_folder import CHECKPOINT_COUNTERS, CHECKPOINT_STATE, latest_checkpoint
from robotrl.learner.checkpoint import Checkpointer
from robotrl.learner.guard import nonfinite_tensors
from robotrl.learner.main import EXIT_DIVERGED
from robotrl.transport.transitions import TransitionSender

PEERS = str(Path(__file__).with_name("fault_peers.py"))
GOOD_EPISODES = 30


def sender(endpoint: str, actor_id: str, spool: Path) -> TransitionSender:
    return TransitionSender(
        endpoint,
        actor_id,
        spool_dir=str(spool),
        write_ahead=True,
        max_inflight=8,
        window=4,
        heartbeat_s=HEARTBEAT_S,
        peer_timeout_s=TIMEOUT_S,
    )


def checkpointed_transitions(run: Path) -> int:
    latest = latest_checkpoint(run)
    return (
        -1 if latest is None else int(json.loads((latest / CHECKPOINT_COUNTERS).read_text())["transitions"])
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_absurd_rewards_and_versions_from_a_peer_are_acked_refused_and_the_checkpoint_stays_finite(tmp_path):
    run, log = tmp_path / "run", tmp_path / "learner.log"
    t_end, w_end = f"ipc://{tmp_path}/t.sock", f"ipc://{tmp_path}/w.sock"
    with open(log, "a") as err:
        learner = subprocess.Popen([sys.executable, PEERS, "learner", str(run), t_end, w_end], stderr=err)
    hostile, good = sender(t_end, "hostile", tmp_path / "spool"), sender(t_end, "actor-0", tmp_path / "spool")
    try:
        rewards = np.zeros(TICKS)
        poison = episode_batch("hostile", 0, range(TICKS), end="terminated", rewards=rewards)
        assert hostile.send(dataclasses.replace(poison, reward=np.full(TICKS, 3e38, np.float32)))
        assert hostile.send(
            dataclasses.replace(poison, episode_id=np.full(TICKS, 1), policy_version=np.full(TICKS, -5))
        )
        assert hostile.flush(120.0) and hostile.stats()["acked"] == 2  # acknowledged: resending is pointless
        for ep in range(GOOD_EPISODES):
            assert good.send(episode_batch("actor-0", ep, range(TICKS), end="terminated", rewards=rewards))
        # Acknowledged means stored: the learner's stop checkpoint then holds every good batch.
        assert good.flush(120.0)
        wait_until(lambda: latest_checkpoint(run) is not None, 120, "a first checkpoint")
        learner.send_signal(signal.SIGTERM)
        learner.wait(60)
    finally:
        hostile.close()
        good.close()
        if learner.poll() is None:
            learner.kill()
    text = log.read_text()
    assert "refused a batch of actor 'hostile' (reward: |reward| 3e+38 > 1000)" in text, text[-3000:]
    latest = latest_checkpoint(run)
    assert (
        latest is not None and checkpointed_transitions(run) == GOOD_EPISODES * TICKS
    )  # the hostile rows: none
    state = torch.load(latest / CHECKPOINT_STATE, map_location="cpu", weights_only=True)
    assert not nonfinite_tensors(state)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_learner_whose_updates_keep_turning_non_finite_exits_non_zero_and_says_why(tmp_path):
    """`robotrl learner` with a learning rate that overflows every update, fed by `robotrl actor`."""
    shared = shared_overrides(tmp_path, max_episode_ticks=90)
    diverging = ("learner.lr=1.0e30", "learner.guard.max_nonfinite_groups=2")
    with learner_running(tmp_path, shared, *diverging) as learner:
        actor = subprocess.Popen(
            [ROBOTRL, "actor", *shared, f"run_dir={tmp_path}/actor", "actor.episodes=20"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_until(lambda: learner.process.poll() is not None, 400, "the learner to stop by itself")
        finally:
            actor.kill()
            actor.wait(30)
    out = learner.output
    assert learner.process.returncode == EXIT_DIVERGED, out[-3000:]
    assert "robotrl learner stopped" in out and "learner.guard.max_nonfinite_groups=2" in out, out[-3000:]
    assert "rolled back to the last good state" in out, out[-3000:]
    assert Checkpointer(tmp_path / "learner").latest() is None  # no finite group: nothing checkpointed
