"""Authentication with CURVE on: who cannot talk to whom.

Real sockets, real CURVE handshakes. Each peer without the right keys is shown to get
nothing through (while an authorized peer on the same endpoint does), from both sides:
an actor without keys or with keys the learner never authorized cannot send
transitions or receive weights, and a learner without the expected server key (no
keys, or an impostor's pair) can neither push weights to an actor nor collect its
transitions.
"""

from __future__ import annotations

import numpy as np
import pytest
from transport_peers import HEARTBEAT_S, TIMEOUT_S, small_batch

from robotrl.transport.transition_receiver import TransitionReceiver
from robotrl.transport.transitions import TransitionSender
from robotrl.transport.weight_subscriber import WeightSubscriber
from robotrl.transport.weights import WeightPublisher
from robotrl.wire.auth import ClientKeys, client_keys, generate, server_keys

LINK = {"heartbeat_s": HEARTBEAT_S, "peer_timeout_s": TIMEOUT_S}
QUIET_S = 8 * HEARTBEAT_S  # several heartbeat periods: ample for any handshake that could succeed


@pytest.fixture
def keys(tmp_path):
    generate(tmp_path / "keys", ["actor-0"])
    generate(tmp_path / "stranger", ["stranger"])
    good = client_keys(tmp_path / "keys", "actor-0")
    other = client_keys(tmp_path / "stranger", "stranger")
    return {
        "server": server_keys(tmp_path / "keys"),
        "impostor_server": server_keys(tmp_path / "stranger"),
        "client": good,
        # a valid pair that knows the learner's public key but was never authorized
        "stranger": ClientKeys(other.public, other.secret, good.server_public),
    }


@pytest.mark.parametrize("who", ["no keys", "unauthorized keys"])
def test_an_actor_without_authorized_keys_cannot_receive_weights(keys, who):
    pub = WeightPublisher("tcp://127.0.0.1:0", keys=keys["server"], **LINK)
    bad = WeightSubscriber(pub.endpoint, keys=None if who == "no keys" else keys["stranger"], **LINK)
    good = WeightSubscriber(pub.endpoint, keys=keys["client"], **LINK)
    try:
        version = pub.publish({"w": np.ones(4, np.float32)})
        got = good.recv(20.0)
        assert got is not None and got.policy_version == version  # the link works for an authorized actor
        assert bad.recv(QUIET_S) is None
        assert not bad.stats()["publisher_alive"]
    finally:
        for s in (good, bad):
            s.close()
        pub.close()
    assert pub.stats()["subscribers"] == 1


@pytest.mark.parametrize("who", ["no keys", "impostor keys"])
def test_a_learner_without_the_server_key_cannot_push_weights_to_an_actor(keys, who):
    server = None if who == "no keys" else keys["impostor_server"]
    impostor = WeightPublisher("tcp://127.0.0.1:0", keys=server, **LINK)
    actor = WeightSubscriber(impostor.endpoint, keys=keys["client"], **LINK)
    try:
        impostor.publish({"w": np.full(4, 666.0, np.float32)})
        assert actor.recv(QUIET_S) is None
        assert actor.latest() is None and not actor.stats()["publisher_alive"]
    finally:
        actor.close()
        impostor.close()
    assert impostor.stats()["subscribers"] == 0


@pytest.mark.parametrize("who", ["no keys", "impostor keys"])
def test_a_learner_without_the_server_key_cannot_collect_an_actors_transitions(keys, who):
    server = None if who == "no keys" else keys["impostor_server"]
    impostor = TransitionReceiver("tcp://127.0.0.1:0", keys=server, **LINK)
    actor = TransitionSender(impostor.endpoint, "actor-0", keys=keys["client"], **LINK)
    try:
        actor.send(small_batch("actor-0", 0))
        assert impostor.recv(QUIET_S) is None
        assert not actor.stats()["learner_alive"] and actor.stats()["unacked"] + actor.backlog() >= 1
    finally:
        actor.close()
        impostor.close()
    assert impostor.actors_alive() == {}


def test_an_unauthorized_actor_cannot_send_transitions_beside_an_authorized_one(keys):
    rx = TransitionReceiver("tcp://127.0.0.1:0", keys=keys["server"], **LINK)
    bad = TransitionSender(rx.endpoint, "stranger", keys=keys["stranger"], **LINK)
    good = TransitionSender(rx.endpoint, "actor-0", keys=keys["client"], **LINK)
    try:
        bad.send(small_batch("stranger", 0))
        good.send(small_batch("actor-0", 0))
        item = rx.recv_item(20.0)
        assert item is not None and item.actor_id == "actor-0"
        assert rx.recv(QUIET_S) is None
    finally:
        for tx in (bad, good):
            tx.close()
        rx.close()
    assert set(rx.actors_alive()) == {"actor-0"}
