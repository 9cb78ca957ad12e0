"""A hostile peer cannot make the learner or the actor hold unbounded state, memory or log lines.

Real sockets throughout; the flood, the oversized message and the measured receiver
run in processes of their own (:mod:`hostile_peers`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq
from fuzz_targets import valid_messages
from waiting import wait_until

from robotrl.core.clock import VirtualClock
from robotrl.transport import protocol as p
from robotrl.transport.transition_receiver import TransitionReceiver
from robotrl.transport.transitions import TransitionSender
from robotrl.wire.codec import Message, decode, encode

sys.path.insert(0, str(Path(__file__).parent))
from hostile_peers import peak_rss_kb, reset_peak_rss
from transport_peers import HEARTBEAT_S, TIMEOUT_S, small_batch

PEERS = str(Path(__file__).with_name("hostile_peers.py"))
LINK = {"heartbeat_s": HEARTBEAT_S, "peer_timeout_s": TIMEOUT_S}
BATCH = decode(valid_messages()[0])  # a valid batch of actor-0, stream s0, seq 3


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, PEERS, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def dealer(ctx: zmq.Context, endpoint: str) -> zmq.Socket:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


@contextlib.contextmanager
def receiver_and_raw_peer(**receiver: Any) -> Iterator[tuple[TransitionReceiver, zmq.Socket]]:
    """A learner's receiver and a raw DEALER connected to it, to send it whatever frames a
    hostile peer would; both closed after."""
    rx = TransitionReceiver("tcp://127.0.0.1:0", **LINK, **receiver)
    ctx = zmq.Context()
    sock = dealer(ctx, rx.endpoint)
    try:
        yield rx, sock
    finally:
        sock.close()
        ctx.term()
        rx.close()


def batch_from(sender: str, seq: int, stream: str = "s0", **meta: object) -> list:
    return encode(Message(BATCH.kind, sender, seq, BATCH.arrays, {**BATCH.meta, "stream": stream, **meta}))


@pytest.mark.timeout(300)
def test_twenty_thousand_ping_identities_leave_no_state_and_few_log_lines(caplog):
    caplog.set_level(logging.INFO, logger="robotrl.transport")
    rx = TransitionReceiver("tcp://127.0.0.1:0", **LINK)
    try:
        flood = spawn("pings", rx.endpoint, "20000")
        out, _ = flood.communicate(timeout=240)
        assert json.loads(out)["pongs"] == 20_000  # every ping was handled (and answered)
        assert rx.actors_alive() == {}
        assert rx.ledger.to_json()["streams"] == []
        lines = [r for r in caplog.records if r.name.startswith("robotrl.transport")]
        assert len(lines) <= 10, f"{len(lines)} log lines for a ping flood"
        tx = TransitionSender(rx.endpoint, "honest", **LINK)
        try:
            assert tx.send(small_batch("honest", 0))
            item = rx.recv_item(30.0)
            assert item is not None and item.actor_id == "honest"
            assert set(rx.actors_alive()) == {"honest"} and len(rx.ledger.accounts()) == 1
        finally:
            tx.close()
    finally:
        rx.close()


@pytest.mark.timeout(120)
def test_implausible_counts_in_pings_and_batches_are_refused():
    with receiver_and_raw_peer() as (rx, sock):
        sock.send_multipart(batch_from("actor-0", 3))
        item = rx.recv_item(30.0)
        assert item is not None and (item.actor_id, item.seq) == ("actor-0", 3)
        bad = [
            encode(p.control(p.PING, "actor-0", stream="s0", next=2**62, dropped=0)),
            encode(p.control(p.PING, "actor-0", stream="s0", next=8, dropped=-5)),
            encode(p.control(p.PING, "actor-0", stream="s0", next=8, dropped=9)),
            batch_from("actor-0", 2**40),
        ]
        for frames in bad:
            sock.send_multipart(frames)
        wait_until(lambda: rx.stats()["rejected_schema"] == len(bad), 30, "every implausible message refused")
        assert rx.ledger.numbered_upto("actor-0", "s0") == 4 and rx.recv_item(0.2) is None
        sock.send_multipart(batch_from("actor-0", 5_000_000, stream="s9"))  # a long-lived actor's
        item = rx.recv_item(30.0)  # stream, new to this learner: its first number is not absurd
        assert item is not None and (item.stream, item.seq) == ("s9", 5_000_000)


@pytest.mark.timeout(120)
def test_a_batch_whose_dims_describe_terabytes_is_refused_and_the_receiver_goes_on():
    with receiver_and_raw_peer() as (rx, sock):
        for dims in ([2**31 - 1, 1, 2**31 - 1, 6], [2**20, 0, 2**20, 0]):
            sock.send_multipart(batch_from("actor-0", 3, dims=dims))
        wait_until(lambda: rx.stats()["rejected_schema"] == 2, 30, "both refused")
        sock.send_multipart(batch_from("actor-0", 3))
        item = rx.recv_item(30.0)
        assert item is not None and (item.actor_id, item.seq) == ("actor-0", 3)


@pytest.mark.timeout(120)
def test_actors_beyond_the_cap_wait_until_one_falls_silent():
    clock = VirtualClock()
    with receiver_and_raw_peer(max_actors=2, clock=clock.now) as (rx, sock):
        for actor in ("a", "b", "c"):
            sock.send_multipart(batch_from(actor, 0))
        wait_until(lambda: rx.stats()["refused_actors"] == 1, 30, "the third actor refused")
        assert set(rx.actors_alive()) == {"a", "b"}
        clock.advance(TIMEOUT_S + 1.0)  # a and b fall silent
        sock.send_multipart(batch_from("c", 0))  # c resends what was not acknowledged
        wait_until(lambda: "c" in rx.actors_alive(), 30, "c to take a silent actor's place")
        assert len(rx.actors_alive()) == 2
        taken = {rx.recv_item(30.0).actor_id for _ in range(3)}  # type: ignore[union-attr]
        assert taken == {"a", "b", "c"}


@pytest.mark.timeout(300)
def test_an_oversized_multi_frame_message_is_refused_without_the_receiver_holding_it():
    """300 MB in three frames: within today's per-frame MAXMSGSIZE (1 GiB), so it used to be
    received whole (the peak memory grows by 300 MB) before the codec refused it."""
    receiver = spawn("receiver")
    ctx = zmq.Context()
    try:
        assert receiver.stdout is not None and receiver.stdin is not None
        endpoint = receiver.stdout.readline().strip()
        sock = dealer(ctx, endpoint)
        events = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        frame = np.zeros(100 << 20, np.uint8)
        sock.send_multipart([frame, frame, frame], copy=False)
        sock.send_multipart(encode(p.control(p.PING, "mallory", stream="s", next=0, dropped=0)))

        def refused_or_read() -> bool:  # disconnected at the first frame, or answered after reading it
            return bool(events.poll(0)) or bool(sock.poll(0))

        wait_until(refused_or_read, 120, "the receiver to cut the peer off or answer its ping")
        receiver.stdin.write("report\n")
        receiver.stdin.flush()
        report = json.loads(receiver.stdout.readline())
        assert report["peak_growth_kb"] < 64 << 10, report  # the limit is 64 MB a message
        events.close()
        sock.close()
    finally:
        receiver.kill()
        receiver.wait()
        ctx.term()


@pytest.mark.timeout(300)
def test_the_actors_weight_subscriber_refuses_a_billion_pieces_before_holding_any(tmp_path: Path):
    """The actor's worker builds its subscriber as production does (the test passes no layout):
    a publisher declaring 1e9 pieces and streaming 400 MB of made-up tensors is refused at its
    first piece, and a valid update afterwards is installed."""
    from learner_doubles import toy_spec

    from robotrl.actor.compose import make_backend, make_policy
    from robotrl.config.schema import RobotRLConfig
    from robotrl.core.types import weights_digest
    from robotrl.transport.sockets import free_endpoint

    cfg = RobotRLConfig()
    cfg.actor.virtual_time = False
    cfg.transport.weights_endpoint = free_endpoint()
    cfg.transport.heartbeat_s, cfg.transport.peer_timeout_s = HEARTBEAT_S, 30.0
    ctx = zmq.Context()
    mallory = ctx.socket(zmq.ROUTER)
    mallory.setsockopt(zmq.LINGER, 0)
    mallory.bind(cfg.transport.weights_endpoint)
    backend, _, _ = make_backend(cfg, toy_spec(), online=True)
    try:
        worker_pid = backend.info.pid
        assert mallory.poll(60_000), "the worker's subscriber never asked for weights"
        before = reset_peak_rss(worker_pid)
        route = mallory.recv_multipart()[0]
        junk = np.ones(1 << 20, np.float32)  # 4 MB a piece, a fresh name each
        for index in range(100):
            meta = {
                "subset": "trainable",
                "created_time": 0.0,
                "index": index,
                "count": 10**9,
                "session": "m",
            }
            piece = Message(p.WPIECE, "learner", 5, {f"junk{index:04d}": junk}, meta)
            mallory.send_multipart([route, *encode(piece)])
        good = dict(sorted(make_policy(cfg.policy, toy_spec()).trainable_tensors().items()))
        meta = {"subset": "trainable", "created_time": 0.0, "index": 0, "count": 1, "session": "m"}
        mallory.send_multipart([route, *encode(Message(p.WPIECE, "learner", 6, good, meta))])
        seal = {"digest": weights_digest(good), "count": 1, "session": "m"}
        mallory.send_multipart([route, *encode(Message(p.WSEAL, "learner", 6, {}, seal))])
        # one connection, in order: once version 6 is staged, the junk before it was handled
        wait_until(lambda: backend.newest_version() == 6, 120, "the valid update", on_wait=backend.poll)
        growth = peak_rss_kb(worker_pid) - before
        assert growth < 150 << 10, f"the worker's peak memory grew by {growth} kB"
    finally:
        backend.close()
        mallory.close()
        ctx.term()
