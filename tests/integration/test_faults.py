"""Fault injection with real processes and sockets: for each fault, what is kept, dropped and counted.

Each test names the log line a user sees, then audits the learner's buffer (saved in its
checkpoint) or its ledger against what the actors sent.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import zmq
from fault_peers import TICKS
from transport_peers import HEARTBEAT_S, TIMEOUT_S, small_batch
from waiting import wait_until

from robotrl.bench.proxy import TcpProxy
from robotrl.learner.journal import LEDGER_FILE
from robotrl.transport.ledger import SeqLedger
from robotrl.transport.transition_receiver import TransitionReceiver
from robotrl.transport.transitions import TransitionSender
from robotrl.transport.weight_subscriber import WeightSubscriber
from robotrl.transport.weights import WeightPublisher
from robotrl.wire.codec import Message, encode
from robotrl.wire.messages import transition_batch_to_message

PEERS = str(Path(__file__).with_name("fault_peers.py"))


def spawn(*args: str, log: Path | None = None) -> subprocess.Popen[str]:
    err = open(log, "a") if log is not None else subprocess.DEVNULL  # noqa: SIM115 (closed with the process)
    return subprocess.Popen([sys.executable, PEERS, *args], stdout=subprocess.PIPE, stderr=err, text=True)


def latest_checkpoint(run: Path) -> Path | None:
    pointer = run / "checkpoints" / "latest"
    return run / "checkpoints" / pointer.read_text().strip() if pointer.exists() else None


def buffer_rows(checkpoint: Path) -> Counter[tuple[int, int]]:
    """(episode, tick) of every row the saved online buffer holds (next-observation rows excluded)."""
    folder = checkpoint / "buffers" / "online"
    meta = json.loads((folder / "replay.json").read_text())
    cursor = int(meta["cursor"])
    episode = np.load(folder / "episode_id.npy")[:cursor]
    tick = np.load(folder / "tick.npy")[:cursor]
    return Counter((int(e), int(t)) for e, t in zip(episode, tick, strict=True) if t < TICKS)


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM, timeout_s: float = 60) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
    proc.wait(timeout_s)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_learner_sigkilled_between_checkpoints_restarts_and_holds_every_transition_once(tmp_path):
    """With the default learner config: every batch it acknowledged before the kill is kept."""
    run = tmp_path / "run"
    t_end, w_end = f"ipc://{tmp_path}/t.sock", f"ipc://{tmp_path}/w.sock"
    log = tmp_path / "learner.log"
    first = spawn("learner", str(run), t_end, w_end, log=log)
    n = 200  # 10 s of batches: the state waited for below (a checkpoint, then >= 3 journaled batches)
    # must come round while the actor still sends; 60 (3 s) sometimes ended before it did
    act = spawn("actor", t_end, "actor-0", "0", str(n), "0.05", str(tmp_path / "spool"))
    second = None
    try:
        # Killed after a checkpoint and with batches acknowledged since (in the journal only).
        def journaled_since_checkpoint() -> int:
            """Journal files written after ``latest`` named the newest checkpoint: batches it does
            not hold (those it holds are deleted only after the pointer is written)."""
            pointer = run / "checkpoints" / "latest"
            try:
                since = pointer.stat().st_mtime_ns
                return sum(p.stat().st_mtime_ns > since for p in (run / "journal").glob("*.rrspool"))
            except FileNotFoundError:  # no checkpoint yet, or a file deleted while counted
                return 0

        def between_checkpoints() -> bool:
            """Frozen (SIGSTOP) in that state, so no checkpoint empties the journal before the kill."""
            if journaled_since_checkpoint() < 3:
                return False
            first.send_signal(signal.SIGSTOP)
            if journaled_since_checkpoint() >= 3:
                return True
            first.send_signal(signal.SIGCONT)
            return False

        wait_until(between_checkpoints, 120, "a checkpoint and journaled batches after it", period_s=0.05)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        second = spawn("learner", str(run), t_end, w_end, log=log)
        stdout, _ = act.communicate(timeout=180)
        stats = json.loads(stdout.strip().splitlines()[-1])
        stop(second)
    finally:
        for proc in (act, first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
    assert stats["flushed"] and stats["acked"] == n and stats["dropped"] == 0, json.dumps(stats)
    text = log.read_text()
    assert "journal: " in text and "received after the last checkpoint restored" in text, text[-3000:]
    final = latest_checkpoint(run)
    assert final is not None
    rows = buffer_rows(final)
    assert [k for k, c in rows.items() if c > 1] == []  # nothing twice
    assert set(rows) == {(e, t) for e in range(n) for t in range(TICKS)}  # nothing lost
    audit = SeqLedger.from_json(json.loads((final / LEDGER_FILE).read_text())).audit()
    assert (audit.received, audit.lost_to_actor_crash, audit.in_flight) == (n, 0, 0)
    assert list((run / "journal").glob("*.rrspool")) == []  # the final checkpoint holds it all


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_actor_sigkilled_and_restarted_resends_its_write_ahead_spool(tmp_path):
    run = tmp_path / "run"
    t_end, w_end = f"ipc://{tmp_path}/t.sock", f"ipc://{tmp_path}/w.sock"
    lrn = spawn("learner", str(run), t_end, w_end, log=tmp_path / "learner.log")
    spool = tmp_path / "spool"
    doomed = spawn("actor", t_end, "actor-0", "0", "1000", "0.02", str(spool))
    again = None
    try:
        wait_until(lambda: latest_checkpoint(run) is not None, 120, "the learner's first checkpoint")
        lrn.send_signal(signal.SIGSTOP)  # no acks for a moment: the actor dies with batches unacked
        unacked = spool / "actor-0"
        wait_until(lambda: len(list(unacked.glob("*.rrspool"))) >= 3, 30, "unacknowledged batches")
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)
        left = len(list(unacked.glob("*.rrspool")))
        lrn.send_signal(signal.SIGCONT)
        again = spawn("actor", t_end, "actor-0", "1000", "5", "0.02", str(spool))
        stdout, _ = again.communicate(timeout=180)
        stats = json.loads(stdout.strip().splitlines()[-1])
        stop(lrn)
    finally:
        for proc in (doomed, again, lrn):
            if proc is not None and proc.poll() is None:
                proc.kill()
    assert stats["flushed"] and list((spool / "actor-0").glob("*.rrspool")) == []
    final = latest_checkpoint(run)
    assert final is not None
    audit = SeqLedger.from_json(json.loads((final / LEDGER_FILE).read_text())).audit()
    # What the dead actor had numbered reached the learner: sent before the kill or resent
    # from its write-ahead spool by the next life. Only batches it never numbered (at most
    # the hand-off queue at the instant of the kill) are outside any ledger.
    assert audit.lost_to_actor_crash == 0 and audit.in_flight == 0
    assert left > 0, "the actor had nothing unacknowledged when killed; nothing was tested"
    rows = buffer_rows(final)
    assert [k for k, c in rows.items() if c > 1] == []
    assert {(e, t) for e in range(1000, 1005) for t in range(TICKS)} <= set(rows)


# -- faults on the link, with the learner's receiver in this process and actors as processes --------

TRANSPORT_PEERS = str(Path(__file__).with_name("transport_peers.py"))
LINK = {"heartbeat_s": HEARTBEAT_S, "peer_timeout_s": TIMEOUT_S}


def spawn_transport_actor(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, TRANSPORT_PEERS, "actor", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def take(rx: TransitionReceiver, n: int, timeout_s: float, pace_s: float = 0.0) -> list[tuple[str, str, int]]:
    """Receive until ``n`` batches came, taking at most one per ``pace_s`` (a slow learner)."""
    got: list[tuple[str, str, int]] = []
    pace = threading.Event()  # never set: a pause between receives
    deadline = time.monotonic() + timeout_s
    while len(got) < n:
        assert time.monotonic() < deadline, f"timed out with {len(got)} of {n} batches"
        item = rx.recv_item(0.1)
        if item is not None:
            got.append((item.actor_id, item.stream, item.seq))
            if pace_s:
                pace.wait(pace_s)
    rx.commit()
    return got


@pytest.mark.parametrize(
    "partition_s", [2.5, pytest.param(10.0, marks=pytest.mark.slow, id="10s")], ids=lambda s: f"{s}s"
)
@pytest.mark.timeout(120)
def test_network_partition_the_actor_reconnects_and_resends_nothing_lost_nothing_twice(partition_s):
    rx = TransitionReceiver("tcp://127.0.0.1:0", **LINK)
    proxy = TcpProxy(rx.endpoint)
    n = 60
    act = spawn_transport_actor(proxy.endpoint, "actor-0", str(n), "0.03", "")
    try:
        got = take(rx, 15, 60)
        proxy.partition()
        wait_until(lambda: not rx.actors_alive()["actor-0"], 10, "the learner to see the actor gone")
        cut = threading.Event()
        cut.wait(max(0.0, partition_s - TIMEOUT_S))  # the partition lasts partition_s in all
        proxy.heal()
        got += take(rx, n - len(got), 60)
        stdout, stderr = act.communicate(timeout=60)
    finally:
        act.kill()
        proxy.close()
        rx.close()
    stats = json.loads(stdout.strip().splitlines()[-1])
    assert "learner silent" in stderr and "reconnecting" in stderr  # what the user sees
    assert stats["flushed"] and stats["reconnects"] >= 1 and stats["dropped"] == 0 and stats["refused"] == 0
    counts = Counter(q for _, _, q in got)
    assert sorted(counts) == list(range(n)) and max(counts.values()) == 1
    audit = rx.ledger.audit()
    assert (audit.received, audit.in_flight, audit.lost_to_actor_crash) == (n, 0, 0)


@pytest.mark.timeout(120)
def test_slow_learner_the_actor_never_waits_and_keeps_every_batch_until_taken():
    rx = TransitionReceiver("tcp://127.0.0.1:0", max_queue=4, **LINK)
    n = 60
    act = spawn_transport_actor(rx.endpoint, "actor-0", str(n), "0.0", "")
    try:
        got = take(rx, n, 90, pace_s=0.05)  # ~20 batches/s, the actor offers them at once
        stdout, _ = act.communicate(timeout=60)
    finally:
        act.kill()
        rx.close()
    stats = json.loads(stdout.strip().splitlines()[-1])
    assert stats["refused"] == 0 and stats["dropped"] == 0 and stats["flushed"]  # send() never refused
    assert rx.stats()["overflow"] == 0  # the credit window, not the learner's small queue, held them back
    assert sorted(q for _, _, q in got) == list(range(n))


def test_nan_in_transitions_is_dropped_at_the_actor_refused_at_the_learner_and_counted(caplog):
    rx = TransitionReceiver("tcp://127.0.0.1:0", **LINK)
    tx = TransitionSender(rx.endpoint, "actor-0", **LINK)
    ctx = zmq.Context()
    raw = ctx.socket(zmq.DEALER)
    raw.setsockopt(zmq.LINGER, 0)
    raw.connect(rx.endpoint)
    try:
        with caplog.at_level(logging.WARNING):
            for i in range(4):
                batch = small_batch("actor-0", i)
                if i == 2:
                    batch = dataclasses.replace(batch, reward=np.full_like(batch.reward, np.nan))
                tx.send(batch)
            got = take(rx, 3, 30)
            assert tx.flush(10)
            # A peer that skips the sender's check (an old build, or a hostile one) is refused on arrival.
            nan = small_batch("mallory", 0)
            nan = dataclasses.replace(nan, state=np.full_like(nan.state, np.nan))
            plain = transition_batch_to_message(nan, 0)
            raw.send_multipart(
                encode(Message(plain.kind, "mallory", 0, plain.arrays, {**plain.meta, "stream": "s"}))
            )
            wait_until(lambda: rx.stats()["rejected_non_finite"] == 1, 10, "the NaN batch to be refused")
            wait_until(lambda: rx.ledger.audit().dropped_by_actor == 1, 10, "the actor's ping")
        assert rx.recv(0.3) is None  # the learner never got a NaN batch to train on
    finally:
        raw.close()
        ctx.term()
        tx.close()
        rx.close()
    assert sorted(q for _, _, q in got) == [0, 1, 3]
    assert tx.stats()["non_finite"] == 1 and tx.stats()["dropped"] == 1
    assert "batch 2 holds NaN or inf in ['reward']; dropped, not sent" in caplog.text
    assert "rejected message (non_finite" in caplog.text
    audit = rx.ledger.audit()
    assert (audit.received, audit.dropped_by_actor, audit.in_flight) == (3, 1, 0)


def test_spool_filling_up_keeps_batches_in_memory_while_the_learner_listens_drops_and_counts_when_away(
    tmp_path, caplog
):
    endpoint = f"ipc://{tmp_path}/t.sock"
    budget = 70_000  # three batches of 32 rows (and their write-ahead copies)
    tx = TransitionSender(
        endpoint,
        "actor-0",
        spool_dir=tmp_path,
        spool_max_bytes=budget,
        max_inflight=2,
        write_ahead=True,
        **LINK,
    )
    try:
        with caplog.at_level(logging.WARNING):
            # The learner is away: 2 batches in memory, the spool takes what fits, the rest is dropped.
            for i in range(40):
                tx.send(small_batch("actor-0", i, rows=32))
            wait_until(lambda: tx.stats()["dropped"] + tx.stats()["spooled"] + 2 == 40, 10, "all 40 numbered")
            dropped = tx.stats()["dropped"]
            assert dropped > 0
            rx = TransitionReceiver(endpoint, **LINK)
            try:
                take(rx, 40 - dropped, 30)
                assert tx.flush(10)
                wait_until(lambda: rx.ledger.audit().dropped_by_actor == dropped, 10, "the actor's ping")
            finally:
                rx.close()
    finally:
        tx.close()
    said = [r.getMessage() for r in caplog.records if "dropped, memory and spool full" in r.getMessage()]
    assert said and f"bytes > {budget})" in said[0]
    assert len(said) < dropped  # counted each time, said once per 10 s with the count
    audit = rx.ledger.audit()
    assert audit.received == 40 - dropped and audit.in_flight == 0 and audit.lost_to_actor_crash == 0
    assert list((tmp_path / "actor-0").glob("*.rrspool")) == []


def test_full_spool_with_the_learner_listening_keeps_write_ahead_batches_in_memory(tmp_path, caplog):
    rx = TransitionReceiver("tcp://127.0.0.1:0", **LINK)
    tx = TransitionSender(
        rx.endpoint, "actor-0", spool_dir=tmp_path, spool_max_bytes=0, write_ahead=True, **LINK
    )
    try:
        with caplog.at_level(logging.WARNING):
            for i in range(10):
                tx.send(small_batch("actor-0", i))
            got = take(rx, 10, 30)
            assert tx.flush(10)
    finally:
        tx.close()
        rx.close()
    assert sorted(q for _, _, q in got) == list(range(10))
    assert tx.stats()["unjournaled"] == 10 and tx.stats()["dropped"] == 0
    assert "kept in memory only" in caplog.text


def test_weight_update_corrupted_on_the_wire_is_refused_the_old_weights_stay(caplog):
    pub = WeightPublisher("tcp://127.0.0.1:0", **LINK)
    proxy = TcpProxy(pub.endpoint)
    layout = {"w": ((1024, 1024), np.dtype(np.float32))}
    sub = WeightSubscriber(proxy.endpoint, expected=layout, shared_memory=False, **LINK)  # the wire path
    try:
        with caplog.at_level(logging.WARNING):
            first = pub.publish({"w": np.full((1024, 1024), 1.0, np.float32)})
            update = sub.recv(20.0)
            assert update is not None and update.policy_version == first
            proxy.corrupt_after(1 << 20)  # a byte 1 MB into the next 4 MB update
            pub.publish({"w": np.full((1024, 1024), 2.0, np.float32)})
            wait_until(proxy.corrupted.is_set, 20, "the proxy to corrupt the update")
            wait_until(lambda: sub.stats()["refused_digest"] == 1, 20, "the corrupted update to be refused")
            assert sub.latest() is None  # nothing to install: the actor keeps version `first`
            third = pub.publish({"w": np.full((1024, 1024), 3.0, np.float32)})
            update = sub.recv(20.0)
    finally:
        sub.close()
        proxy.close()
        pub.close()
    assert update is not None and update.policy_version == third and float(update.tensors["w"][0, 0]) == 3.0
    assert "weights: refused update (digest" in caplog.text
