"""A learner restarted without its checkpoint: the actor follows its new session's versions.

Real publisher processes on a real socket, the actor's real subscriber and weight slots in
this process: the restarted learner's versions start over below the ones the actor holds,
and must still reach the active policy, while a replay of the replaced session never does.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from doubles import TickPolicy
from fault_peers import TICKS
from learner_doubles import MLPChunkPolicy, episode_batch
from transport_peers import HEARTBEAT_S, TIMEOUT_S
from waiting import wait_until

from robotrl.actor.slots import PolicySlots
from robotrl.transport.transitions import TransitionSender
from robotrl.transport.weight_subscriber import WeightSubscriber

PEERS = str(Path(__file__).with_name("transport_peers.py"))
FAULT_PEERS = str(Path(__file__).with_name("fault_peers.py"))


def start_learner(
    out: Path, endpoint: str, first: int, last: int, session: str = ""
) -> subprocess.Popen[bytes]:
    """A learner's weight side publishing versions first..last, one every 0.3 s."""
    out.with_suffix(".endpoint").unlink(missing_ok=True)
    args = [sys.executable, PEERS, "bias_publisher", endpoint, str(out), str(first), str(last), "0.3"]
    proc = subprocess.Popen([*args, session] if session else args)
    wait_until(lambda: out.with_suffix(".endpoint").exists(), 30, "the publisher to bind")
    return proc


class Actor:
    """The actor's weight path: subscriber -> slots.stage -> swap between two inferences."""

    def __init__(self, endpoint: str) -> None:
        self.sub = WeightSubscriber(endpoint, heartbeat_s=HEARTBEAT_S, peer_timeout_s=TIMEOUT_S)
        self.slots = PolicySlots(TickPolicy(horizon=4), TickPolicy(horizon=4))
        self.active: list[tuple[str, int]] = []  # (session, version) of every swap, in order
        self._staged: dict[int, str] = {}

    def step(self) -> None:
        """What the worker's loader and serving threads do, once."""
        update = self.sub.latest()
        if update is not None and self.slots.stage(update):
            self._staged[update.policy_version] = update.session
        if self.slots.swap_if_staged():
            version = self.slots.policy_version
            assert float(self.slots.active.trainable_tensors()["bias"][0]) == version
            self.active.append((self._staged[version], version))

    def runs(self, session: str, version: int) -> bool:
        return bool(self.active) and self.active[-1] == (session, version)


@pytest.mark.timeout(180)
def test_a_learner_restarted_without_checkpoint_is_followed_and_its_old_session_never_taken_again(
    tmp_path, caplog
):
    caplog.set_level(logging.INFO)
    first = start_learner(tmp_path / "first", "tcp://127.0.0.1:0", 1, 5)
    endpoint = (tmp_path / "first.endpoint").read_text()
    actor = Actor(endpoint)
    procs = [first]
    try:
        wait_until(lambda: actor.slots.policy_version == 5, 60, "v5 of the first learner", on_wait=actor.step)
        old_session = actor.active[-1][0]
        first.send_signal(signal.SIGKILL)
        first.wait(10)

        # Restarted without a checkpoint: versions 1, 2, 3 again, below the 5 the actor runs.
        procs.append(start_learner(tmp_path / "second", endpoint, 1, 3))
        wait_until(
            lambda: actor.slots.policy_version == 3 and actor.active[-1][0] != old_session,
            60,
            "the restarted learner's v3 to become the active policy",
            on_wait=actor.step,
        )
        new_session = actor.active[-1][0]
        assert "learner session changed" in caplog.text and "publisher session changed" in caplog.text
        assert f"{old_session!r} at v5 -> {new_session!r}" in caplog.text

        # A replay of the replaced session, numbered above everything: refused, counted, never active.
        procs[-1].send_signal(signal.SIGKILL)
        procs[-1].wait(10)
        procs.append(start_learner(tmp_path / "replay", endpoint, 6, 8, session=old_session))
        wait_until(
            lambda: actor.sub.stats()["refused_old_session"] >= 3,
            60,
            "the replayed session's updates to be refused",
            on_wait=actor.step,
        )
        actor.step()
    finally:
        actor.sub.close()
        for proc in procs:
            proc.kill()
            proc.wait(10)
    switch = next(i for i, (session, _) in enumerate(actor.active) if session == new_session)
    assert {session for session, _ in actor.active[:switch]} == {old_session}, actor.active
    assert all(session == new_session for session, _ in actor.active[switch:]), actor.active
    versions = [v for _, v in actor.active[switch:]]
    assert versions == sorted(set(versions)) and versions[-1] == 3  # rising within the session
    assert actor.slots.policy_version == 3 and actor.slots.refused["old_session"] == 0
    assert np.float32(actor.slots.active.trainable_tensors()["bias"][0]) == 3.0


class LearningActor(Actor):
    """The actor's weight path over the real learner's policy, plus its transitions: each batch
    carries the version the actor runs, as a real actor's do. A batch goes only once the last
    was acknowledged, so no backlog of older versions reaches a restarted learner first."""

    def __init__(self, t_endpoint: str, w_endpoint: str, spool: Path) -> None:
        self.sub = WeightSubscriber(w_endpoint, heartbeat_s=HEARTBEAT_S, peer_timeout_s=TIMEOUT_S)
        self.slots = PolicySlots(MLPChunkPolicy(2, 4, 3, hidden=16), MLPChunkPolicy(2, 4, 3, hidden=16))
        self.active = []
        self._staged = {}
        self.tx = TransitionSender(
            t_endpoint, "actor-0", spool_dir=spool, heartbeat_s=HEARTBEAT_S, peer_timeout_s=TIMEOUT_S
        )
        self.episodes = 0

    def step(self) -> None:
        update = self.sub.latest()
        if update is not None and self.slots.stage(update):
            self._staged[update.policy_version] = update.session
        if self.slots.swap_if_staged():
            self.active.append((self._staged[self.slots.policy_version], self.slots.policy_version))
        if self.tx.stats()["acked"] < self.episodes:
            return
        version = self.slots.policy_version
        batch = episode_batch("actor-0", self.episodes, range(TICKS), end="terminated", version=version)
        self.tx.send(batch)
        self.episodes += 1

    def close(self) -> None:
        self.sub.close()
        self.tx.close()


def spawn_learner(run: Path, t_end: str, w_end: str, log: Path) -> subprocess.Popen[bytes]:
    """The real learner composition (fault_peers.py): a run folder of its own, so no checkpoint."""
    with open(log, "a") as err:
        return subprocess.Popen([sys.executable, FAULT_PEERS, "learner", str(run), t_end, w_end], stderr=err)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_real_learner_restarted_without_checkpoint_numbers_above_its_actors_and_is_followed(tmp_path):
    t_end, w_end = f"ipc://{tmp_path}/t.sock", f"ipc://{tmp_path}/w.sock"
    log = tmp_path / "learner.log"
    procs = [spawn_learner(tmp_path / "first", t_end, w_end, log)]
    actor = LearningActor(t_end, w_end, tmp_path / "spool")
    try:
        wait_until(lambda: actor.slots.policy_version >= 5, 180, "v5 of the first learner", 0.05, actor.step)
        old_session = actor.active[-1][0]
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(10)
        procs.append(spawn_learner(tmp_path / "second", t_end, w_end, log))
        wait_until(
            lambda: actor.active[-1][0] != old_session,
            180,
            "the restarted learner's weights to become the active policy",
            0.05,
            actor.step,
        )
    finally:
        actor.close()
        for proc in procs:
            proc.kill()
            proc.wait(10)
    old_version = max(v for s, v in actor.active if s == old_session)
    assert actor.active[-1][1] > old_version  # it counted on from the versions its actor reported, not from 1
    assert "policy versions continue above v" in log.read_text()
