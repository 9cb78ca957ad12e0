"""The transition stream between real processes over real sockets: nothing lost, nothing twice."""

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
from collections.abc import Callable
from pathlib import Path

import msgpack
import numpy as np
import pytest
import zmq

from robotrl.core.clock import VirtualClock
from robotrl.transport import protocol as p
from robotrl.transport.sockets import free_endpoint
from robotrl.transport.transition_receiver import TransitionReceiver
from robotrl.transport.transitions import TransitionSender
from robotrl.wire.codec import Message, encode
from robotrl.wire.messages import transition_batch_to_message

sys.path.insert(0, str(Path(__file__).parent))
from transport_peers import HEARTBEAT_S, TIMEOUT_S, small_batch
from waiting import wait_until as wait_for

PEERS = str(Path(__file__).with_name("transport_peers.py"))


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, PEERS, *args], stdout=subprocess.PIPE, text=True)


def lines(path: Path) -> list[tuple[str, str, int]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        actor, stream, seq = line.split()
        out.append((actor, stream, int(seq)))
    return out


LINK = {"heartbeat_s": HEARTBEAT_S, "peer_timeout_s": TIMEOUT_S}


def receiver(**kwargs: object) -> TransitionReceiver:
    return TransitionReceiver(
        "tcp://127.0.0.1:0", heartbeat_s=HEARTBEAT_S, peer_timeout_s=TIMEOUT_S, **kwargs
    )


def sender(endpoint: str, actor_id: str, **kwargs: object) -> TransitionSender:
    return TransitionSender(endpoint, actor_id, heartbeat_s=HEARTBEAT_S, peer_timeout_s=TIMEOUT_S, **kwargs)


def drain(rx: TransitionReceiver, until: Callable[[list[tuple[str, str, int]]], bool], timeout_s: float):
    got: list[tuple[str, str, int]] = []
    deadline = time.monotonic() + timeout_s
    while not until(got):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out; received {len(got)} batches")
        item = rx.recv_item(0.1)
        if item is not None:
            got.append((item.actor_id, item.stream, item.seq))
    rx.commit()
    return got


def test_learner_killed_and_restarted_mid_stream_gets_every_sequence_number_once(tmp_path):
    out = tmp_path / "received.txt"
    first = spawn("learner", "tcp://127.0.0.1:0", str(out))
    wait_for(lambda: out.with_suffix(".endpoint").exists(), 30, "the learner to bind")
    endpoint = out.with_suffix(".endpoint").read_text()
    n = 120
    act = spawn("actor", endpoint, "actor-0", str(n), "0.01", str(tmp_path / "spool"))
    try:
        wait_for(lambda: len(lines(out)) >= 30, 60, "the first batches")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        killed_at = len(lines(out))
        assert killed_at < n, "the stream ended before the kill; nothing was tested"
        second = spawn("learner", endpoint, str(out))
        try:
            stdout, _ = act.communicate(timeout=120)
            stats = json.loads(stdout.strip().splitlines()[-1])
        finally:
            second.send_signal(signal.SIGKILL)
            second.wait(10)
    finally:
        act.kill()
        first.kill()
    got = lines(out)
    counts = Counter((s, q) for _, s, q in got)
    assert [k for k, c in counts.items() if c > 1] == []
    assert sorted(q for _, _, q in got) == list(range(n))
    assert stats["flushed"] and stats["acked"] == n


def test_actor_killed_and_restarted_the_learner_keeps_going(tmp_path):
    rx = receiver()
    try:
        doomed = spawn("actor", rx.endpoint, "actor-0", "1000", "0.01", str(tmp_path / "spool"))
        first = drain(rx, lambda got: len(got) >= 10, 60)
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)
        wait_for(
            lambda: not rx.actors_alive().get("actor-0", True), 10, "the learner to notice the dead actor"
        )
        again = spawn("actor", rx.endpoint, "actor-0", "20", "0.0", str(tmp_path / "spool"))
        streams = {first[0][1]}
        second = drain(rx, lambda got: sum(1 for g in got if g[1] not in streams) >= 20, 60)
        again.communicate(timeout=60)
    finally:
        rx.close()
    new = sorted(q for _, s, q in second if s not in streams)
    assert new == list(range(20))
    accounts = {a.stream: a for a in rx.ledger.accounts()}
    assert len(accounts) == 2 and accounts[second[-1][1]].missing == []


def test_several_actors_to_one_learner_are_accounted_separately(tmp_path):
    rx = receiver()
    actors = [
        spawn("actor", rx.endpoint, f"actor-{i}", "15", "0.0", str(tmp_path / "spool")) for i in range(2)
    ]
    try:
        got = drain(rx, lambda got: len(got) >= 30, 60)
        for a in actors:
            assert json.loads(a.communicate(timeout=60)[0].strip().splitlines()[-1])["flushed"]
    finally:
        for a in actors:
            a.kill()
        rx.close()
    per_actor = {a: sorted(q for x, _, q in got if x == a) for a in ("actor-0", "actor-1")}
    assert per_actor == {"actor-0": list(range(15)), "actor-1": list(range(15))}
    accounts = rx.ledger.accounts()
    assert [(a.actor_id, a.received, a.duplicates, a.missing) for a in accounts] == [
        ("actor-0", 15, 0, []),
        ("actor-1", 15, 0, []),
    ]


def test_batches_wait_in_the_spool_while_the_learner_is_away(tmp_path):
    endpoint = free_endpoint()  # nobody listening: the learner is away
    tx = sender(endpoint, "actor-0", spool_dir=tmp_path, max_inflight=4)
    try:
        assert all(tx.send(small_batch("actor-0", i)) for i in range(20))  # never waits
        wait_for(lambda: tx.stats()["spooled"] == 16, 10, "batches beyond memory to reach the spool")
        assert len(list((tmp_path / "actor-0").glob("*.rrspool"))) == 16
        rx = TransitionReceiver(endpoint, heartbeat_s=HEARTBEAT_S, peer_timeout_s=TIMEOUT_S)
        try:
            got = drain(rx, lambda got: len(got) >= 20, 30)
            assert tx.flush(10)
        finally:
            rx.close()
    finally:
        tx.close()
    assert sorted(q for _, _, q in got) == list(range(20))
    assert list((tmp_path / "actor-0").glob("*.rrspool")) == []  # acked batches leave the spool


def test_spool_left_by_a_dead_actor_is_sent_by_its_next_life(tmp_path):
    endpoint = free_endpoint()  # nobody listening: the learner is away
    first = sender(endpoint, "actor-0", spool_dir=tmp_path, max_inflight=1)
    for i in range(5):
        first.send(small_batch("actor-0", i))
    wait_for(lambda: first.stats()["spooled"] == 4, 10, "spooling")
    first.close()  # dies with one batch in memory (lost, and accounted as missing) and 4 on disk
    second = sender(endpoint, "actor-0", spool_dir=tmp_path)
    rx = TransitionReceiver(endpoint, heartbeat_s=HEARTBEAT_S, peer_timeout_s=TIMEOUT_S)
    try:
        got = drain(rx, lambda got: len(got) >= 4, 30)
    finally:
        rx.close()
        second.close()
    assert sorted(q for _, s, q in got if s == first.stream) == [1, 2, 3, 4]


def test_a_joined_batch_a_dead_actor_spooled_counts_each_of_its_batches_once_acknowledged(tmp_path):
    endpoint = free_endpoint()  # nobody listening: the learner is away
    options = {"spool_dir": tmp_path, "max_inflight": 1, "write_ahead": True, "coalesce_bytes": 1 << 20}
    first = sender(endpoint, "actor-0", **options)
    assert first.send(small_batch("actor-0", 0))
    wait_for(lambda: first.stats()["unacked"] == 1, 10, "the first batch to be numbered")
    assert all(first.send(small_batch("actor-0", i)) for i in range(1, 10))
    wait_for(lambda: first.stats()["spooled"] == 9, 10, "the nine queued behind it to be spooled joined")
    first.close()
    assert first.stats()["joined"] == 8 and first.stats()["unacked"] == first.backlog() == 10
    assert len(list((tmp_path / "actor-0").glob("*.rrspool"))) == 2
    second = sender(endpoint, "actor-0", **options)
    rx = TransitionReceiver(endpoint, heartbeat_s=HEARTBEAT_S, peer_timeout_s=TIMEOUT_S)
    try:
        got = drain(rx, lambda got: len(got) >= 2, 30)
        rx.commit()
        assert second.flush(10)
    finally:
        rx.close()
        second.close()
    assert sorted(q for _, s, q in got if s == first.stream) == [0, 1]
    assert second.stats()["acked"] == 10  # batches, as ``send`` took them: not the two messages


def test_each_batch_is_reported_numbered_once_its_write_ahead_copy_is_on_disk(tmp_path):
    """What a crash audit counts as handed over (``on_numbered``) is what a next life resends:
    the soak bench adds what its audit file missed from the spool."""
    from robotrl.bench.soak import spooled_rows_after

    endpoint = free_endpoint()  # nobody listening: every batch stays unacknowledged
    reported: list[tuple[str, int, int, bool]] = []

    def on_numbered(stream: str, seq: int, rows: int) -> None:
        on_disk = (tmp_path / "actor-0" / f"{stream}-{seq:016d}.rrspool").exists()
        reported.append((stream, seq, rows, on_disk))

    tx = sender(endpoint, "actor-0", spool_dir=tmp_path, write_ahead=True, on_numbered=on_numbered)
    try:
        for i in range(5):
            assert tx.send(small_batch("actor-0", i, rows=3 + i))
        wait_for(lambda: len(reported) == 5, 10, "five batches numbered")
    finally:
        tx.close()
    assert reported == [(tx.stream, i, 3 + i, True) for i in range(5)]
    # an audit file that counted the first two batches: the spool holds the rest uncounted
    assert spooled_rows_after(tmp_path / "actor-0", {tx.stream: 1}) == {tx.stream: (5 + 6 + 7, 4)}
    assert spooled_rows_after(tmp_path / "actor-0", {tx.stream: 4}) == {}
    assert spooled_rows_after(tmp_path / "actor-0", {}) == {tx.stream: (3 + 4 + 5 + 6 + 7, 4)}


def test_when_the_spool_is_full_batches_are_dropped_and_the_learner_sees_them_missing(tmp_path):
    endpoint = free_endpoint()
    # The learner is away; memory for one batch, disk for none: batches 1..5 are dropped, counted.
    tx = sender(endpoint, "actor-0", spool_dir=tmp_path, spool_max_bytes=0, max_inflight=1)
    try:
        for i in range(6):
            tx.send(small_batch("actor-0", i))
        wait_for(lambda: tx.stats()["dropped"] == 5, 10, "batches beyond the budgets to be dropped")
        rx = TransitionReceiver(endpoint, **LINK)
        try:
            got = drain(rx, lambda got: len(got) >= 1, 20)
            assert tx.flush(10)
            wait_for(lambda: rx.ledger.accounts()[0].numbered == 6, 10, "the actor's ping")
        finally:
            rx.close()
    finally:
        tx.close()
    account = rx.ledger.accounts()[0]
    assert account.received == len(got) == 1
    assert account.missing == [(1, 6)]


def _raw_dealer(ctx: zmq.Context, endpoint: str) -> zmq.Socket:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


def test_corrupted_truncated_and_replayed_messages_are_rejected_and_counted():
    rx = receiver()
    ctx = zmq.Context()
    raw = _raw_dealer(ctx, rx.endpoint)
    batch = small_batch("mallory", 0)
    good = transition_batch_to_message(batch, 0)
    frames = [
        bytes(f)
        for f in encode(Message(good.kind, good.sender, 0, good.arrays, {**good.meta, "stream": "s1"}))
    ]
    try:
        raw.send_multipart([b"\xc1garbage", *frames[1:]])  # corrupted header
        raw.send_multipart([frames[0], frames[1][:-3], *frames[2:]])  # a truncated array
        raw.send_multipart(frames)
        raw.send_multipart(frames)  # replayed
        wait_for(
            lambda: rx.stats()["duplicates"] >= 1 and rx.stats()["rejected_truncated"] >= 1, 10, "rejections"
        )
        assert rx.recv(1.0) is not None and rx.recv(0.2) is None  # exactly one delivered
    finally:
        raw.close()
        ctx.term()
        rx.close()
    stats = rx.stats()
    assert (
        stats["rejected_header"],
        stats["rejected_truncated"],
        stats["duplicates"],
        stats["received"],
    ) == (
        1,
        1,
        1,
        1,
    )


def test_wrong_schema_version_is_refused_with_both_versions_named(caplog):
    rx = receiver()
    ctx = zmq.Context()
    raw = _raw_dealer(ctx, rx.endpoint)
    header = msgpack.packb(
        {"v": 99, "kind": p.PING, "sender": "old-actor", "seq": 0, "meta": {}, "arrays": []}
    )
    try:
        with caplog.at_level(logging.WARNING):
            raw.send_multipart([header])
            wait_for(lambda: rx.stats()["rejected_schema_version"] == 1, 10, "the rejection")
    finally:
        raw.close()
        ctx.term()
        rx.close()
    assert "schema version 99, this build speaks 1" in caplog.text


def test_ipc_endpoints_work_like_tcp(tmp_path):
    rx = TransitionReceiver(
        f"ipc://{tmp_path}/transitions", heartbeat_s=HEARTBEAT_S, peer_timeout_s=TIMEOUT_S
    )
    tx = sender(rx.endpoint, "actor-0")
    try:
        for i in range(3):
            tx.send(small_batch("actor-0", i))
        got = drain(rx, lambda got: len(got) >= 3, 20)
        assert tx.flush(10)
    finally:
        tx.close()
        rx.close()
    assert [q for _, _, q in got] == [0, 1, 2]


def test_batches_handed_over_before_the_first_poll_do_not_hold_the_first_ping_back(monkeypatch):
    """The sender's first ping went out after its first poll: batches handed over before that poll
    (the I/O thread still starting) were taken at once, so nothing woke the poll, and with the
    idle poll at a minute the learner first heard of the actor a minute later. The poll now ends
    when the heartbeat falls due (seen under load: ``make test`` beside a training run)."""
    monkeypatch.setattr("robotrl.transport.transitions.POLL_MS", 60_000)
    handed_over = threading.Event()
    start = TransitionSender.on_start

    def start_after_the_hand_over(self: TransitionSender) -> None:
        handed_over.wait(10)
        start(self)

    monkeypatch.setattr(TransitionSender, "on_start", start_after_the_hand_over)
    rx = receiver()
    tx = sender(rx.endpoint, "actor-0")
    try:
        assert all(tx.send(small_batch("actor-0", i)) for i in range(3))
        handed_over.set()
        got = drain(rx, lambda got: len(got) == 3, 30)
    finally:
        tx.close()
        rx.close()
    assert sorted(seq for _, _, seq in got) == [0, 1, 2]


@pytest.mark.parametrize("while_acked", [True, False])
def test_a_flush_waits_while_the_learner_keeps_acknowledging_and_not_once_it_stops(while_acked):
    """Three batches acknowledged 0.9 s apart (on an injected clock): a flush of 1 s that each
    acknowledgement extends delivers them all; one that is not extended gives up at 1 s, with
    the last batch still unacknowledged."""
    clock = VirtualClock()
    flushed: list[bool] = []
    flushing = threading.Thread(target=lambda: flushed.append(tx.flush(1.0, while_acked=while_acked)))
    flush_began = threading.Event()

    def now() -> float:
        if threading.current_thread() is flushing:
            flush_began.set()  # its deadline is set: the clock may move
        return clock.now()

    rx = receiver()
    tx = sender(rx.endpoint, "actor-0", clock=now)
    try:
        # pings go out on the injected clock: move it until one is answered
        wait_for(lambda: clock.advance(HEARTBEAT_S) or tx.stats()["learner_alive"], 10, "the learner")
        for i in range(3):
            assert tx.send(small_batch("actor-0", i))
        wait_for(lambda: tx.stats()["unacked"] == 3, 10, "the three batches to be numbered")
        flushing.start()
        assert flush_began.wait(10)
        for acked in range(3):
            assert rx.recv_item(10) is not None  # acknowledges the one before
            wait_for(lambda n=acked: tx.stats()["acked"] == n, 10, f"{acked} acknowledged")
            clock.advance(0.9)
        if while_acked:
            rx.commit()  # the last one: the flush is done once it is counted
        flushing.join(10)
    finally:
        tx.close()
        rx.close()
    assert flushed == [while_acked]


def test_batches_and_acks_flow_without_waiting_for_a_poll_to_time_out(monkeypatch):
    """Work handed to a link's I/O thread wakes it: with the loops' idle poll at a minute, a sender
    whose window holds two batches still gets forty through, each ack let out the moment the
    learner takes the next batch (a poll ending only on its timeout would take 20 minutes)."""
    monkeypatch.setattr("robotrl.transport.transitions.POLL_MS", 60_000)
    monkeypatch.setattr("robotrl.transport.transition_receiver.POLL_MS", 60_000)
    rx = receiver()
    tx = sender(rx.endpoint, "actor-0", window=2)
    try:
        for i in range(40):
            assert tx.send(small_batch("actor-0", i))
        got = drain(rx, lambda got: len(got) == 40, 30)
        assert tx.flush(30)
    finally:
        tx.close()
        rx.close()
    assert sorted(seq for _, _, seq in got) == list(range(40))


def _queued_behind_a_learner_away(tmp_path: Path, batches: list, rows: int) -> tuple:
    """``batches`` sent while no learner listens, with room in memory for one: the first is
    numbered at once, the others wait queued behind it; then a learner starts and takes
    ``rows``. The batches it took, the sender's stats."""
    endpoint = f"ipc://{tmp_path}/t.sock"
    tx = sender(endpoint, "actor-0", max_inflight=1, coalesce_bytes=1 << 20)
    rx = None
    taken = []
    try:
        assert tx.send(batches[0])
        wait_for(lambda: tx.stats()["unacked"] == 1, 10, "the first batch to be numbered")
        assert all(tx.send(batch) for batch in batches[1:])  # no room: they wait in the queue
        rx = receiver_at(endpoint)
        deadline = time.monotonic() + 30
        while sum(len(b) for b in taken) < rows:
            assert time.monotonic() < deadline, f"took {len(taken)} batches"
            item = rx.recv_item(0.1)
            if item is not None:
                taken.append(item.batch)
        rx.commit()
        assert tx.flush(10)
        return taken, tx.stats()
    finally:
        tx.close()
        if rx is not None:
            rx.close()


def receiver_at(endpoint: str) -> TransitionReceiver:
    return TransitionReceiver(endpoint, heartbeat_s=HEARTBEAT_S, peer_timeout_s=TIMEOUT_S)


def test_batches_queued_behind_one_another_go_out_joined_in_order(tmp_path):
    batches = [small_batch("actor-0", i) for i in range(10)]
    taken, stats = _queued_behind_a_learner_away(tmp_path, batches, rows=40)
    assert [len(b) for b in taken] == [4, 36]  # the first alone, the nine queued behind it in one
    assert stats["joined"] == 8 and stats["sent"] == 2 and stats["acked"] == stats["queued"] == 10
    ticks = np.concatenate([b.tick for b in taken])
    np.testing.assert_array_equal(ticks, np.arange(40))
    np.testing.assert_array_equal(np.concatenate([b.state[:, 0] for b in taken]), np.repeat(np.arange(10), 4))


@pytest.mark.parametrize(
    ("fault", "field", "value", "non_finite"),
    [("nan", "reward", np.full(4, np.nan, np.float32), 1), ("not encodable", "tick", np.full(4, 0.5), 0)],
)
def test_a_joined_batch_with_a_bad_one_goes_apart_and_only_the_batch_at_fault_is_dropped(
    tmp_path, fault, field, value, non_finite
):
    batches = [small_batch("actor-0", i) for i in range(10)]
    batches[5] = dataclasses.replace(batches[5], **{field: value})
    taken, stats = _queued_behind_a_learner_away(tmp_path, batches, rows=36)
    assert [len(b) for b in taken] == [4] * 9, fault  # after the bad one, each went alone
    assert stats.get("non_finite", 0) == non_finite and stats["dropped"] == 1 and stats.get("joined", 0) == 0
    ticks = np.concatenate([b.tick for b in taken])
    np.testing.assert_array_equal(ticks, [t for t in range(40) if not 20 <= t < 24])


def test_batches_that_encode_alone_but_not_joined_go_alone_and_none_is_dropped(tmp_path):
    """Nine instructions of 40 KiB fit a header each, not together (256 KiB): the joined message
    fails to encode, and its batches go one by one instead of being dropped with it."""
    batches = [small_batch("actor-0", i) for i in range(10)]
    batches = [
        dataclasses.replace(b, instructions=(f"{i:05d}" + "x" * 40_000,)) for i, b in enumerate(batches)
    ]
    taken, stats = _queued_behind_a_learner_away(tmp_path, batches, rows=40)
    assert [len(b) for b in taken] == [4] * 10
    assert stats.get("dropped", 0) == 0 and stats.get("joined", 0) == 0 and stats["acked"] == 10
    assert [b.instructions[0][:5] for b in taken] == [f"{i:05d}" for i in range(10)]


def test_a_receiver_that_cannot_bind_says_so_and_leaves_no_thread_behind():
    """A failed bind used to leave its I/O thread waiting forever on the context of its unbound
    socket (and six descriptors with it), once per attempt."""
    taken = receiver()

    def io_threads() -> int:
        return sum(t.name == "transitions-rx" for t in threading.enumerate())

    before = io_threads()
    try:
        for _ in range(5):
            with pytest.raises(RuntimeError, match="could not bind"):
                TransitionReceiver(taken.endpoint)
        wait_for(lambda: io_threads() == before, 10, "the failed receivers' threads to end")
    finally:
        taken.close()
