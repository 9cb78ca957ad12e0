"""CURVE on both links: authorized actors get through; a peer without the key is refused."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from robotrl.cli import main as cli_main
from robotrl.transport.transition_receiver import TransitionReceiver
from robotrl.transport.transitions import TransitionSender
from robotrl.transport.weight_subscriber import WeightSubscriber
from robotrl.transport.weights import WeightPublisher
from robotrl.wire.auth import ClientKeys, client_keys, generate, server_keys

sys.path.insert(0, str(Path(__file__).parent))
from transport_peers import HEARTBEAT_S, TIMEOUT_S, small_batch

LINK = {"heartbeat_s": HEARTBEAT_S, "peer_timeout_s": TIMEOUT_S}


def test_keys_generate_writes_loadable_pairs(tmp_path, capsys):
    assert cli_main(["keys", "generate", "--dir", str(tmp_path / "keys")]) == 0
    assert "server.key" in capsys.readouterr().out
    assert server_keys(tmp_path / "keys").authorized_dir.is_dir()
    assert client_keys(tmp_path / "keys", "actor-0").server_public == server_keys(tmp_path / "keys").public
    assert cli_main(["keys", "generate", "--dir", str(tmp_path / "keys")]) == 1  # never overwrites silently


def test_with_curve_an_actor_without_the_key_is_refused_and_one_with_it_gets_through(tmp_path):
    generate(tmp_path / "keys", ["authorized"])
    generate(tmp_path / "stranger", ["stranger"])  # a valid pair the learner never authorized
    good = client_keys(tmp_path / "keys", "authorized")
    stranger = client_keys(tmp_path / "stranger", "stranger")
    stranger = ClientKeys(stranger.public, stranger.secret, good.server_public)
    rx = TransitionReceiver("tcp://127.0.0.1:0", keys=server_keys(tmp_path / "keys"), **LINK)
    plain = TransitionSender(rx.endpoint, "plain", **LINK)
    unknown = TransitionSender(rx.endpoint, "stranger", keys=stranger, **LINK)
    authorized = TransitionSender(rx.endpoint, "authorized", keys=good, **LINK)
    try:
        for tx, name in ((plain, "plain"), (unknown, "stranger")):
            tx.send(small_batch(name, 0))
        # By the time the authorized actor's second batch arrives, the others have had several
        # heartbeat periods to get through; nothing of theirs did.
        for i in range(2):
            authorized.send(small_batch("authorized", i))
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 2 and time.monotonic() < deadline:
            item = rx.recv_item(0.1)
            if item is not None:
                got.append(item.actor_id)
        deadline = time.monotonic() + 5 * HEARTBEAT_S
        while time.monotonic() < deadline:
            item = rx.recv_item(0.1)
            if item is not None:
                got.append(item.actor_id)
    finally:
        for tx in (plain, unknown, authorized):
            tx.close()
        rx.close()
    assert got == ["authorized", "authorized"]
    assert not plain.stats()["learner_alive"] and not unknown.stats()["learner_alive"]
    assert set(rx.actors_alive()) == {"authorized"}


def test_weights_over_curve_reach_only_authorized_subscribers(tmp_path):
    generate(tmp_path / "keys")
    pub = WeightPublisher("tcp://127.0.0.1:0", keys=server_keys(tmp_path / "keys"), **LINK)
    good = WeightSubscriber(pub.endpoint, keys=client_keys(tmp_path / "keys", "actor-0"), **LINK)
    plain = WeightSubscriber(pub.endpoint, **LINK)
    try:
        pub.publish({"w": np.ones(4, np.float32)})
        assert good.recv(20.0) is not None
        assert plain.recv(5 * HEARTBEAT_S) is None
        # Counted while both are open: a closing subscriber says goodbye and leaves the count.
        subscribers = pub.stats()["subscribers"]
    finally:
        for s in (good, plain):
            s.close()
        pub.close()
    assert subscribers == 1
