"""Fuzzing the real receivers over real sockets: a hostile peer sends damaged messages of every kind.

Each endpoint a peer can reach (the learner's transition receiver and weight publisher,
the actor's transition sender and weight subscriber) gets a derandomized corpus of
damaged messages from a raw ZeroMQ socket, then must still be alive and do its job
with an honest peer: nothing a peer sends may crash, hang or wedge an I/O thread.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import zmq
from fuzz_targets import mutate, valid_messages
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from waiting import wait_until

from robotrl.transport.transition_receiver import TransitionReceiver
from robotrl.transport.transitions import TransitionSender
from robotrl.transport.weight_subscriber import WeightSubscriber
from robotrl.transport.weights import WeightPublisher
from robotrl.wire.codec import decode

sys.path.insert(0, str(Path(__file__).parent))
from transport_peers import HEARTBEAT_S, TIMEOUT_S, small_batch

EXAMPLES = int(os.environ.get("ROBOTRL_FUZZ_SOCKET_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
LINK = {"heartbeat_s": HEARTBEAT_S, "peer_timeout_s": TIMEOUT_S}
VALID = valid_messages()
damage = st.tuples(
    st.integers(0, len(VALID) - 1),
    st.lists(
        st.tuples(
            st.integers(0, 7),
            st.integers(0, 1 << 20),
            st.binary(max_size=32),
            st.none()
            | st.integers(-(2**63), 2**63 - 1)
            | st.text(max_size=8)
            | st.lists(st.integers(), max_size=3),
        ),
        min_size=1,
        max_size=3,
    ),
)


def damaged(kind: int, damages: list) -> list[bytes]:
    frames = VALID[kind]
    for how, at, data, value in damages:
        frames = mutate(frames, how, at, data, value) or [b""]
    return frames


def raw(ctx: zmq.Context, kind: int, endpoint: str, bind: bool = False) -> zmq.Socket:
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 100_000)
    if bind:
        sock.bind(endpoint)
    else:
        sock.connect(endpoint)
    return sock


def test_learner_transition_receiver_survives_hostile_actors():
    rx = TransitionReceiver("tcp://127.0.0.1:0", **LINK)
    ctx = zmq.Context()
    mallory = raw(ctx, zmq.DEALER, rx.endpoint)

    @FUZZ
    @given(damage)
    def send(case):
        mallory.send_multipart(damaged(*case))

    try:
        send()
        tx = TransitionSender(rx.endpoint, "honest", **LINK)
        try:
            tx.send(small_batch("honest", 0))
            item = rx.recv_item(20.0)
            while item is not None and item.actor_id != "honest":
                item = rx.recv_item(20.0)  # a fuzzed copy of a valid batch may be accepted whole
            assert item is not None and item.seq == 0
            assert tx.flush(10)
        finally:
            tx.close()
    finally:
        mallory.close()
        ctx.term()
        rx.close()
    rejected = sum(v for k, v in rx.stats().items() if k.startswith("rejected_"))
    assert rejected > EXAMPLES // 2


def test_learner_weight_publisher_survives_hostile_subscribers():
    pub = WeightPublisher("tcp://127.0.0.1:0", **LINK)
    ctx = zmq.Context()
    mallory = raw(ctx, zmq.DEALER, pub.endpoint)

    @FUZZ
    @given(damage)
    def send(case):
        mallory.send_multipart(damaged(*case))

    try:
        send()
        layout = {"w": ((8,), np.dtype(np.float32))}
        sub = WeightSubscriber(pub.endpoint, expected=layout, **LINK)
        try:
            version = pub.publish({"w": np.ones(8, np.float32)})
            update = sub.recv(20.0)
            assert update is not None and update.policy_version == version
        finally:
            sub.close()
    finally:
        mallory.close()
        ctx.term()
        pub.close()


def _route_of_first(sock: zmq.Socket, kind: bytes) -> bytes:
    """The ZeroMQ identity of the first peer that sends a message of ``kind``."""
    while True:
        assert sock.poll(20_000), "the peer never spoke"
        frames = sock.recv_multipart()
        if decode(frames[1:]).kind == kind.decode():
            return frames[0]


def test_actor_transition_sender_survives_a_hostile_learner():
    ctx = zmq.Context()
    mallory = raw(ctx, zmq.ROUTER, "tcp://127.0.0.1:*", bind=True)
    endpoint = mallory.getsockopt(zmq.LAST_ENDPOINT).decode()
    tx = TransitionSender(endpoint, "actor-0", **LINK)
    try:
        route = _route_of_first(mallory, b"ping")

        @FUZZ
        @given(damage)
        def send(case):
            mallory.send_multipart([route, *damaged(*case)])

        send()
        while mallory.poll(0):  # what it sent during the fuzzing
            mallory.recv_multipart()
        assert _route_of_first(mallory, b"ping") == route  # the I/O thread still runs and pings
        stats = tx.stats()
    finally:
        tx.close()
        mallory.close()
        ctx.term()
    assert sum(v for k, v in stats.items() if k.startswith("rejected_")) > 0


def test_actor_weight_subscriber_survives_a_hostile_publisher():
    ctx = zmq.Context()
    mallory = raw(ctx, zmq.ROUTER, "tcp://127.0.0.1:*", bind=True)
    endpoint = mallory.getsockopt(zmq.LAST_ENDPOINT).decode()
    layout = {"w": ((4, 4), np.dtype(np.float32)), "b": ((4,), np.dtype(np.float32))}
    sub = WeightSubscriber(endpoint, expected=layout, **LINK)
    try:
        route = _route_of_first(mallory, b"want")

        @FUZZ
        @given(damage)
        def send(case):
            mallory.send_multipart([route, *damaged(*case)])

        send()
        wait_until(lambda: _route_of_first(mallory, b"want") == route, 20, "a want after the fuzzing")
        assert sub.latest() is None  # nothing forged was installed
        refused = sum(v for k, v in sub.stats().items() if k.startswith("refused_"))
    finally:
        sub.close()
        mallory.close()
        ctx.term()
    assert refused > 0
