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
from learner_doubles import MLPChunkPolicy, episode_batch, small_learner_config, toy_spec
from transport_peers import HEARTBEAT_S, TIMEOUT_S
from waiting import wait_until

from robotrl.config.learner import RapiConfig
from robotrl.learner.journal import Journal
from robotrl.learner.main import build_learner
from robotrl.transport.inproc import QueueLink
from robotrl.transport.transition_receiver import Received, TransitionReceiver
from robotrl.transport.transitions import TransitionSender

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
