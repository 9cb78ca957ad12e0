"""Identity on the transition link: an actor id is bound to the key that authenticated it, and
a second live process with one actor id fences the first by an epoch that a learner restart keeps.

Real sockets throughout, real CURVE handshakes, and real actor processes for the impostor and
for two processes sharing an id (tests/integration/identity_peers.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from transport_peers import HEARTBEAT_S, TIMEOUT_S, small_batch
from waiting import wait_until

from robotrl.transport.ledger import SeqLedger
from robotrl.transport.sockets import free_endpoint
from robotrl.transport.transition_receiver import Received, TransitionReceiver
from robotrl.transport.transitions import TransitionSender
from robotrl.wire.auth import client_keys, generate, server_keys

LINK = {"heartbeat_s": HEARTBEAT_S, "peer_timeout_s": TIMEOUT_S}
QUIET_S = 8 * HEARTBEAT_S  # several heartbeat periods: ample for any message that could get through
PEERS = str(Path(__file__).with_name("identity_peers.py"))


def _spawn(
    endpoint: str,
    n: int,
    period_s: float,
    spool: Path,
    actor_id: str = "actor-0",
    keys: tuple[Path, str] | None = None,
) -> subprocess.Popen[str]:
    """An actor process; with ``keys`` (directory, whose pair) it speaks CURVE."""
    args = [sys.executable, PEERS, "actor", endpoint, actor_id, str(n), str(period_s), str(spool)]
    if keys is not None:
        args += [str(keys[0]), keys[1]]
    return subprocess.Popen(args, stdout=subprocess.PIPE, text=True)


def test_an_actor_with_another_actors_key_cannot_speak_for_it(tmp_path):
    keys = tmp_path / "keys"
    generate(keys, ["actor-0", "actor-1"])
    rx = TransitionReceiver("tcp://127.0.0.1:0", keys=server_keys(keys), **LINK)
    liar = _spawn(rx.endpoint, 3, 0.0, tmp_path / "spool", "actor-0", keys=(keys, "actor-1"))
    honest = TransitionSender(rx.endpoint, "actor-1", keys=client_keys(keys, "actor-1"), **LINK)
    try:
        wait_until(lambda: rx.stats()["refused_identity"] >= 1, 30.0, "the liar's messages refused")
        honest.send(small_batch("actor-1", 0))
        item = rx.recv_item(20.0)
        assert item is not None and item.actor_id == "actor-1"  # the key is authorized for actor-1
        assert rx.recv(QUIET_S) is None  # nothing in actor-0's name ever arrives
        assert liar.poll() is None  # no pong for a ping in another's name: it still waits
    finally:
        liar.kill()
        liar.wait()
        honest.close()
        rx.close()
    assert set(rx.actors_alive()) == {"actor-1"}


def _drain_until_exit(
    rx: TransitionReceiver, procs: list[subprocess.Popen[str]], got: list[Received]
) -> None:
    """Receive (and so acknowledge) every batch until each process has exited."""

    def take() -> None:
        while (item := rx.recv_item(0.05)) is not None:
            got.append(item)

    wait_until(lambda: all(p.poll() is not None for p in procs), 120.0, "the actors to finish", on_wait=take)
    take()
    rx.commit()


@pytest.mark.slow
def test_a_second_live_process_with_the_same_actor_id_fences_the_first_and_nothing_is_lost(tmp_path):
    spool = tmp_path / "spool"
    rx = TransitionReceiver("tcp://127.0.0.1:0", **LINK)
    got: list[Received] = []
    # The older process stops sending once fenced, so its budget (80 s) only has to outlast the
    # newer one's start-up: with 400 batches (8 s) it once finished and flushed first.
    older = _spawn(rx.endpoint, 4000, 0.02, spool)
    newer = None
    try:

        def take_until_older_is_sending() -> bool:
            item = rx.recv_item(0.05)
            if item is not None:
                got.append(item)
            return len(got) >= 20

        wait_until(take_until_older_is_sending, 60.0, "the first process's batches")
        newer = _spawn(rx.endpoint, 100, 0.02, spool)
        _drain_until_exit(rx, [older, newer], got)
        old_stats, new_stats = (json.loads(p.communicate()[0]) for p in (older, newer))
        assert old_stats["fenced"] and not old_stats["flushed"]
        assert new_stats["flushed"] and not new_stats["fenced"] and new_stats["acked"] >= 100
        assert rx.stats()["fenced"] >= 1
        # The fenced process's unacknowledged batches wait in the spool: the next start sends them.
        restarted = _spawn(rx.endpoint, 0, 0.0, spool)
        _drain_until_exit(rx, [restarted], got)
        assert json.loads(restarted.communicate()[0])["flushed"]
    finally:
        for proc in (older, newer):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        rx.close()
    taken = {(item.stream, item.seq) for item in got}
    assert len(taken) == len(got)  # nothing handed to the learner twice
    assert sum(1 for s, _ in taken if s == old_stats["stream"]) == old_stats["queued"]
    assert sum(1 for s, _ in taken if s == new_stats["stream"]) == 100
    duplicates = rx.stats()["duplicates"]
    resent = old_stats["resent"] + new_stats["resent"]
    print(f"batches {len(got)}, duplicates {duplicates}, resent {resent}, fenced {rx.stats()['fenced']}")
    assert duplicates <= 8 and resent <= 8  # only the older process's window in flight at the takeover


def test_a_restarted_learner_still_fences_a_superseded_process(tmp_path):
    quiet_endpoint = free_endpoint()
    older = TransitionSender(quiet_endpoint, "actor-0", **LINK)  # its learner is not up yet
    first = TransitionReceiver("tcp://127.0.0.1:0", ledger=SeqLedger(), **LINK)
    newer = TransitionSender(first.endpoint, "actor-0", **LINK)
    second = None
    try:
        newer.send(small_batch("actor-0", 0))
        assert first.recv_item(20.0) is not None
        first.commit()
        wait_until(lambda: first.ledger.epoch("actor-0") == newer.stream, 20.0, "the newer process's epoch")
        checkpoint = json.loads(json.dumps(first.ledger.to_json()))
        first.close()
        second = TransitionReceiver(quiet_endpoint, ledger=SeqLedger.from_json(checkpoint), **LINK)
        older.send(small_batch("actor-0", 0))
        wait_until(lambda: older.stats()["fenced"], 20.0, "the older process told it is fenced")
        assert second.recv(QUIET_S) is None and second.stats()["fenced"] >= 1
    finally:
        for tx in (older, newer):
            tx.close()
        for rx in (first, second):
            if rx is not None:
                rx.close()


def test_a_restarted_actor_resuming_its_spool_is_not_fenced(tmp_path):
    spool = tmp_path / "spool"
    first = TransitionReceiver("tcp://127.0.0.1:0", ledger=SeqLedger(), **LINK)
    before = TransitionSender(first.endpoint, "actor-0", spool_dir=spool, write_ahead=True, **LINK)
    second = after = None
    try:
        before.send(small_batch("actor-0", 0))
        assert first.recv_item(20.0) is not None
        first.commit()
        assert before.flush(20.0)
        checkpoint = first.ledger.to_json()
        first.close()
        for i in range(1, 4):  # the learner is away: these wait in the spool
            before.send(small_batch("actor-0", i))
        wait_until(lambda: len(list((spool / "actor-0").iterdir())) >= 3, 20.0, "three spooled batches")
        before.close()
        second = TransitionReceiver(first.endpoint, ledger=SeqLedger.from_json(checkpoint), **LINK)
        after = TransitionSender(second.endpoint, "actor-0", spool_dir=spool, write_ahead=True, **LINK)
        got = [second.recv_item(20.0) for _ in range(3)]
        second.commit()
        assert after.flush(20.0)
    finally:
        for tx in (before, after):
            if tx is not None:
                tx.close()
        for rx in (first, second):
            if rx is not None:
                rx.close()
    assert sorted((g.stream, g.seq) for g in got if g is not None) == [(before.stream, s) for s in (1, 2, 3)]
    assert second.stats()["fenced"] == 0 and not after.stats()["fenced"]
