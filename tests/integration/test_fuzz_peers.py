"""Fuzzing the real receivers over real sockets: a hostile peer sends damaged messages of every kind.

Each endpoint a peer can reach (the learner's transition receiver and weight publisher,
the actor's transition sender and weight subscriber) gets a derandomized corpus of
damaged messages from a raw ZeroMQ socket, then must still be alive and do its job
with an honest peer: nothing a peer sends may crash, hang or wedge an I/O thread.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import zmq
from fuzz_targets import fixed_corpus, mutate, valid_messages
from hypothesis import given
from hypothesis import strategies as st
from waiting import wait_until

from robotrl.config.transport import TransportConfig
from robotrl.transport.transition_receiver import TransitionReceiver
from robotrl.transport.transitions import TransitionSender
from robotrl.transport.weight_subscriber import WeightSubscriber
from robotrl.transport.weights import WeightPublisher
from robotrl.wire.codec import decode

sys.path.insert(0, str(Path(__file__).parent))
from transport_peers import HEARTBEAT_S, TIMEOUT_S, small_batch

EXAMPLES = int(os.environ.get("ROBOTRL_FUZZ_SOCKET_EXAMPLES", "150"))
FUZZ = fixed_corpus(EXAMPLES)
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


@contextmanager
def mallory(kind: int, endpoint: str, bind: bool = False) -> Iterator[zmq.Socket]:
    """The hostile peer's raw ZeroMQ socket, in a context of its own that closes with it."""
    ctx = zmq.Context()
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 100_000)
    try:
        if bind:
            sock.bind(endpoint)
        else:
            sock.connect(endpoint)
        yield sock
    finally:
        sock.close()
        ctx.term()


def send_damaged_corpus(sock: zmq.Socket, *route: bytes) -> None:
    """Send the whole corpus of damaged messages, each behind ``route`` (a ROUTER's peer identity)."""

    @FUZZ
    @given(damage)
    def send(case):
        sock.send_multipart([*route, *damaged(*case)])

    send()


def production_transport(**fields: object) -> TransportConfig:
    """The default transport config (its limits and caps), on free ports, with the tests' timings."""
    return TransportConfig(heartbeat_s=HEARTBEAT_S, peer_timeout_s=TIMEOUT_S, **fields)


def test_learner_transition_receiver_survives_hostile_actors():
    rx = TransitionReceiver.from_config(production_transport(transitions_endpoint="tcp://127.0.0.1:0"))
    try:
        with mallory(zmq.DEALER, rx.endpoint) as hostile:
            send_damaged_corpus(hostile)
            tx = TransitionSender(rx.endpoint, "honest", **LINK)
            try:
                tx.send(small_batch("honest", 0))
                item = rx.recv_item(20.0)
                while item is not None and item.actor_id != "honest":
                    item = rx.recv_item(20.0)  # a fuzzed copy of a valid batch may be accepted whole
                assert item is not None and item.seq == 0
                rx.commit()  # taken: acknowledge it (a resend of a held batch is not acknowledged)
                assert tx.flush(10)
            finally:
                tx.close()
    finally:
        rx.close()
    rejected = sum(v for k, v in rx.stats().items() if k.startswith("rejected_"))
    assert rejected > EXAMPLES // 2


def test_learner_weight_publisher_survives_hostile_subscribers():
    pub = WeightPublisher("tcp://127.0.0.1:0", **LINK)
    try:
        with mallory(zmq.DEALER, pub.endpoint) as hostile:
            send_damaged_corpus(hostile)
            layout = {"w": ((8,), np.dtype(np.float32))}
            sub = WeightSubscriber(pub.endpoint, expected=layout, **LINK)
            try:
                version = pub.publish({"w": np.ones(8, np.float32)})
                update = sub.recv(20.0)
                assert update is not None and update.policy_version == version
            finally:
                sub.close()
    finally:
        pub.close()


def _route_of_first(sock: zmq.Socket, kind: bytes) -> bytes:
    """The ZeroMQ identity of the first peer that sends a message of ``kind``."""
    while True:
        assert sock.poll(20_000), "the peer never spoke"
        frames = sock.recv_multipart()
        if decode(frames[1:]).kind == kind.decode():
            return frames[0]


def test_actor_transition_sender_survives_a_hostile_learner():
    with mallory(zmq.ROUTER, "tcp://127.0.0.1:*", bind=True) as hostile:
        endpoint = hostile.getsockopt(zmq.LAST_ENDPOINT).decode()
        tx = TransitionSender(endpoint, "actor-0", **LINK)
        try:
            route = _route_of_first(hostile, b"ping")
            send_damaged_corpus(hostile, route)
            while hostile.poll(0):  # what it sent during the fuzzing
                hostile.recv_multipart()
            assert _route_of_first(hostile, b"ping") == route  # the I/O thread still runs and pings
            stats = tx.stats()
        finally:
            tx.close()
    assert sum(v for k, v in stats.items() if k.startswith("rejected_")) > 0


@pytest.mark.timeout(300)
def test_actor_worker_built_as_in_production_survives_a_hostile_publisher():
    """The subscriber the actor's worker builds for itself (no layout from the test) under the corpus."""
    from learner_doubles import toy_spec

    from robotrl.actor.compose import make_backend
    from robotrl.config.schema import RobotRLConfig

    with mallory(zmq.ROUTER, "tcp://127.0.0.1:*", bind=True) as hostile:
        cfg = RobotRLConfig()
        cfg.actor.virtual_time = False
        cfg.transport = production_transport(weights_endpoint=hostile.getsockopt(zmq.LAST_ENDPOINT).decode())
        backend, _, _ = make_backend(cfg, toy_spec(), online=True)
        try:
            route = _route_of_first(hostile, b"want")
            send_damaged_corpus(hostile, route)
            wait_until(lambda: _route_of_first(hostile, b"want") == route, 20, "a want after the fuzzing")
            backend.poll()
            assert backend.failure() is None and backend.newest_version() == 0  # nothing forged installed
        finally:
            backend.close()


def test_actor_weight_subscriber_survives_a_hostile_publisher():
    with mallory(zmq.ROUTER, "tcp://127.0.0.1:*", bind=True) as hostile:
        endpoint = hostile.getsockopt(zmq.LAST_ENDPOINT).decode()
        layout = {"w": ((4, 4), np.dtype(np.float32)), "b": ((4,), np.dtype(np.float32))}
        sub = WeightSubscriber(endpoint, expected=layout, **LINK)
        try:
            route = _route_of_first(hostile, b"want")
            send_damaged_corpus(hostile, route)
            wait_until(lambda: _route_of_first(hostile, b"want") == route, 20, "a want after the fuzzing")
            assert sub.latest() is None  # nothing forged was installed
            refused = sum(v for k, v in sub.stats().items() if k.startswith("refused_"))
        finally:
            sub.close()
    assert refused > 0
