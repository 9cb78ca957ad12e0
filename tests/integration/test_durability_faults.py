"""Acknowledged means durable: a journal that refuses a batch leaves it unacknowledged with the
actor, which resends it; nothing is acknowledged that is not on disk, and nothing is lost.

Real ZeroMQ sockets (ipc) between a real sender and receiver, the real learner composition
on the default learner config, a real journal on disk whose byte budget is the fault.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import zmq
from learner_doubles import MLPChunkPolicy, episode_batch, small_learner_config, toy_spec
from transport_peers import HEARTBEAT_S, TIMEOUT_S
from waiting import wait_until

from robotrl.config.learner import RapiConfig
from robotrl.learner.journal import Journal
from robotrl.learner.main import build_learner
from robotrl.transport import protocol as p
from robotrl.transport.inproc import QueueLink, TransitionQueue
from robotrl.transport.transition_receiver import Received, TransitionReceiver
from robotrl.transport.transitions import TransitionSender
from robotrl.wire.codec import Message, decode, encode
from robotrl.wire.messages import transition_batch_to_message

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LINK = {"heartbeat_s": HEARTBEAT_S, "peer_timeout_s": TIMEOUT_S}
SPEC = toy_spec()
TICKS = 10
N = 4  # two fit the journal; the other two are refused until a checkpoint empties it


def batches() -> list:
    return [episode_batch("actor-0", ep, range(TICKS), end="terminated") for ep in range(N)]


def journal_file_bytes(tmp_path) -> int:
    """The size of one batch's journal file, measured by journaling one."""
    probe = Journal(tmp_path / "probe", 1 << 20)
    probe.append(Received("actor-0", "s", 0, batches()[0]))
    return probe.files()[0].stat().st_size


def saved_rows(checkpoint: Path | None) -> Counter[tuple[int, int]]:
    """(episode, tick) of every row the checkpoint's online buffer holds (next-observation rows excluded)."""
    assert checkpoint is not None
    folder = checkpoint / "buffers" / "online"
    cursor = int(json.loads((folder / "replay.json").read_text())["cursor"])
    episode = np.load(folder / "episode_id.npy")[:cursor]
    tick = np.load(folder / "tick.npy")[:cursor]
    return Counter((int(e), int(t)) for e, t in zip(episode, tick, strict=True) if t < TICKS)


def test_a_batch_the_journal_refuses_is_not_acknowledged_and_its_resend_is_taken(tmp_path, caplog):
    cfg = small_learner_config(
        str(tmp_path / "run"),
        RapiConfig(
            critic_hidden=16, critic_updates_per_group=1, critic_warmup_updates=0, critic_images=False
        ),
    )
    assert cfg.learner.save_buffers  # the default config journals
    rx = TransitionReceiver(f"ipc://{tmp_path}/t.sock", **LINK)
    learner = build_learner(cfg, MLPChunkPolicy(2, 4, 3, hidden=16), SPEC, rx, QueueLink(), console=False)
    assert learner.journal is not None
    # The fault: the journal's disk holds two batches; the third and later are refused until a
    # checkpoint empties it.
    learner.journal = Journal(learner.journal.directory, 2 * journal_file_bytes(tmp_path) + 100)
    tx = TransitionSender(rx.endpoint, "actor-0", spool_dir=tmp_path / "spool", write_ahead=True, **LINK)
    try:
        with caplog.at_level(logging.ERROR):
            for b in batches():
                assert tx.send(b)

            def both_refused() -> bool:
                learner.ingest_next(0.05)
                return learner.journal_refusals.total >= N - 2

            wait_until(both_refused, 60, "the full journal refusing the last two batches")
            learner.ingest_next(0.5)  # ... and the acks of everything taken before are out
            journaled = len(learner.journal.files())
            assert journaled == 2
            assert tx.stats()["acked"] <= journaled  # never an ack for what is not on disk
            assert learner.counters.transitions == journaled * TICKS  # nor stored without it
            learner.save()  # the checkpoint holds the two and empties the journal
            assert learner.journal.files() == []

            def all_taken() -> bool:
                learner.ingest_next(0.05)
                return learner.counters.transitions == N * TICKS

            wait_until(all_taken, 60, "the refused batches resent and taken")
            learner.ingest_next(0.0)  # acknowledges the last one
            assert tx.flush(30)
            learner.save()
    finally:
        tx.close()
        rx.close()
        learner.online.close()
        learner.anchor.close()
    stats = tx.stats()
    assert (stats["acked"], stats["dropped"]) == (N, 0) and stats["resent"] >= 1
    audit = rx.ledger.audit()
    assert (audit.received, audit.in_flight, audit.lost_to_actor_crash, audit.duplicates) == (N, 0, 0, 0)
    assert saved_rows(learner.checkpointer.latest()) == Counter(  # type: ignore[union-attr]
        (ep, t) for ep in range(N) for t in range(TICKS)
    )  # every row of every batch, once
    refusals = [r.getMessage() for r in caplog.records if "journal refused batch" in r.getMessage()]
    assert 1 <= len(refusals) < learner.journal_refusals.total  # said why, sparingly
    assert "not acknowledged, the actor will resend it" in refusals[0]


def test_a_resend_of_the_batch_being_journaled_is_not_acknowledged_before_the_journal_has_it(tmp_path):
    """A reconnect makes the actor resend every unacknowledged batch, the one the learner is
    journaling too: the receiver must not answer that copy with an ack (the journal may yet refuse)."""
    rx = TransitionReceiver(f"ipc://{tmp_path}/t.sock", **LINK)
    ctx = zmq.Context()
    actor = ctx.socket(zmq.DEALER)
    actor.setsockopt(zmq.LINGER, 0)
    actor.connect(rx.endpoint)
    plain = transition_batch_to_message(episode_batch("actor-0", 0, range(TICKS)), 0)
    frames = encode(Message(plain.kind, "actor-0", 0, plain.arrays, {**plain.meta, "stream": "s1"}))
    try:
        actor.send_multipart(frames)
        held = rx.recv_item(20.0)
        assert held is not None and held.seq == 0  # handed out, not yet journaled
        actor.send_multipart(frames)  # the resend
        wait_until(lambda: rx.stats()["duplicates"] >= 1, 20, "the resend to arrive")
        actor.send_multipart(encode(p.control(p.PING, "actor-0", stream="s1", next=1)))
        kinds: list[str] = []
        while not kinds or kinds[-1] != p.PONG:  # whatever the receiver sent comes before the pong
            assert actor.poll(20_000), f"no pong; got {kinds}"
            kinds.append(decode(actor.recv_multipart()).kind)
        assert p.ACK not in kinds
        rx.hand_back()  # the journal refused it: the next resend is taken
        actor.send_multipart(frames)
        again = rx.recv_item(20.0)
        assert again is not None and again.seq == 0
    finally:
        actor.close()
        ctx.term()
        rx.close()
    assert rx.ledger.audit().received == 1


def test_fsync_settings_reach_the_journal_and_checkpoints(tmp_path):
    """Observed through the count of syncs each writer made: on by default, off when relaxed."""
    calls = {}
    for fsync in (True, False):
        cfg = small_learner_config(
            str(tmp_path / f"run-{fsync}"), RapiConfig(critic_hidden=16, critic_images=False), fsync=fsync
        )
        learner = build_learner(cfg, MLPChunkPolicy(2, 4, 3, hidden=16), SPEC, TransitionQueue(), QueueLink())
        try:
            learner.transitions.send(batches()[0])  # type: ignore[attr-defined]
            assert learner.ingest_next(5.0)
            learner.save()
        finally:
            learner.online.close()
            learner.anchor.close()
        assert learner.journal is not None and learner.checkpointer is not None
        calls[fsync] = (learner.journal.fsync.calls, learner.checkpointer.fsync.calls)
    assert calls[True][0] >= 2 and calls[True][1] > 5 and calls[False] == (0, 0)


def test_a_learner_that_stops_acknowledges_the_last_batch_it_stored(tmp_path):
    """The receiver acknowledges a batch at the next receive; a stopping learner asks for none,
    so without its own acknowledgement the actor would resend the batch it stored last (and a
    learner restarted without a checkpoint would store it twice)."""
    cfg = small_learner_config(
        str(tmp_path / "run"),
        RapiConfig(
            critic_hidden=16, critic_updates_per_group=1, critic_warmup_updates=0, critic_images=False
        ),
    )
    # Links that never give up on a silent peer here: on a loaded machine a 1 s timeout could
    # reconnect while the learner checkpoints and drop the very ack this test checks.
    patient = {**LINK, "peer_timeout_s": 30.0}
    rx = TransitionReceiver(f"ipc://{tmp_path}/t.sock", **patient)
    learner = build_learner(cfg, MLPChunkPolicy(2, 4, 3, hidden=16), SPEC, rx, QueueLink(), console=False)
    tx = TransitionSender(rx.endpoint, "actor-0", spool_dir=tmp_path / "spool", write_ahead=True, **patient)
    try:
        for b in batches():
            assert tx.send(b)
        wait_until(
            lambda: learner.ingest_next(0.05) and learner.counters.transitions == N * TICKS, 60, "all stored"
        )
        learner.stop()  # asked for while the last batch is held, stored and not yet acknowledged
        learner.run()
        # Read while the link is up: the actor's socket drops an ack it had not read when the
        # learner's socket closes, which a loaded machine's actor thread can miss (1 run in 8).
        assert tx.flush(10), str(tx.stats())  # a str: pytest would cut a dict short
    finally:
        tx.close()
        rx.close()
        learner.online.close()
        learner.anchor.close()
    assert tx.stats()["acked"] == N
