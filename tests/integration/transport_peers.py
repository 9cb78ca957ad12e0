"""Peer processes for the transport integration tests: `python transport_peers.py ROLE ...`.

Each role is a real process with real sockets, so a test can SIGKILL it mid-stream.

- ``learner ENDPOINT OUT``: receive transitions; append ``actor stream seq`` per batch
  to OUT (flushed per batch, so a SIGKILL loses nothing written). On start, the lines
  already in OUT restore the ledger: what an earlier life took is not taken twice.
  The bound endpoint is written to OUT.endpoint.
- ``actor ENDPOINT ACTOR_ID N PERIOD_S SPOOL_DIR``: send N batches, one every PERIOD_S,
  wait until all are acknowledged, print the sender's stats as JSON.
- ``publisher ENDPOINT OUT VERSIONS``: publish VERSIONS versions of a small tensor set
  (tensor "w" filled with the version number), write the bound endpoint to
  OUT.endpoint, then serve until killed.
- ``bias_publisher ENDPOINT OUT FIRST LAST PERIOD_S [SESSION]``: a learner's weight side
  for a TickPolicy: publish versions FIRST..LAST of its ``bias`` (the version number as the
  value), one every PERIOD_S, then serve until killed. SESSION, when given, replaces the
  publisher's random session id: every message then replays that earlier session's.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

from robotrl.core.batch import TransitionBatch
from robotrl.core.types import Observation, Transition
from robotrl.transport.ledger import SeqLedger
from robotrl.transport.transition_receiver import TransitionReceiver
from robotrl.transport.transitions import TransitionSender
from robotrl.transport.weights import WeightPublisher

HEARTBEAT_S = 0.2
TIMEOUT_S = 1.0


def small_batch(actor_id: str, index: int, rows: int = 4) -> TransitionBatch:
    """A state-only batch whose ticks encode ``index`` (so a receiver can check contents)."""
    out = []
    for r in range(rows):
        tick = index * rows + r
        obs = Observation(tick, np.full(8, index, np.float32), {}, "reach", 0.0)
        action = np.zeros(6, np.float32)
        out.append(Transition(actor_id, 0, tick, obs, action, action, 0.0, False, False, False, 0, r, 0, 0))
    return TransitionBatch.from_transitions(out)


def write_endpoint(out: Path, endpoint: str) -> None:
    tmp = out.with_suffix(".tmp")
    tmp.write_text(endpoint)
    os.replace(tmp, out.with_suffix(".endpoint"))


def learner(endpoint: str, out_path: str) -> None:
    out = Path(out_path)
    ledger = SeqLedger()
    if out.exists():
        for line in out.read_text().splitlines():
            actor, stream, seq = line.split()
            ledger.record(actor, stream, int(seq))
    rx = TransitionReceiver(endpoint, ledger=ledger, heartbeat_s=HEARTBEAT_S, peer_timeout_s=TIMEOUT_S)
    write_endpoint(out, rx.endpoint)
    with open(out, "a") as f:
        while True:
            item = rx.recv_item(1.0)
            if item is None:
                continue
            assert int(item.batch.state[0, 0]) == item.seq, "batch contents do not match its seq"
            f.write(f"{item.actor_id} {item.stream} {item.seq}\n")
            f.flush()


def actor(endpoint: str, actor_id: str, n: str, period_s: str, spool_dir: str) -> None:
    tx = TransitionSender(
        endpoint,
        actor_id,
        spool_dir=spool_dir,
        max_inflight=8,
        window=4,
        heartbeat_s=HEARTBEAT_S,
        peer_timeout_s=TIMEOUT_S,
    )
    for i in range(int(n)):
        assert tx.send(small_batch(actor_id, i))
        time.sleep(float(period_s))
    ok = tx.flush(120.0)
    stats = tx.stats()
    stats["flushed"] = ok
    print(json.dumps(stats), flush=True)
    tx.close()


def publisher(endpoint: str, out_path: str, versions: str) -> None:
    pub = WeightPublisher(
        endpoint, heartbeat_s=HEARTBEAT_S, peer_timeout_s=TIMEOUT_S, start_policy_version=100
    )
    for v in range(int(versions)):
        pub.publish({"w": np.full((64, 64), v, np.float32), "b": np.zeros(64, np.float32)})
    write_endpoint(Path(out_path), pub.endpoint)
    threading.Event().wait()  # serve until the test kills this process


def bias_publisher(
    endpoint: str, out_path: str, first: str, last: str, period_s: str, session: str = ""
) -> None:
    pub = WeightPublisher(endpoint, heartbeat_s=HEARTBEAT_S, peer_timeout_s=TIMEOUT_S)
    if session:
        pub.session = session
    write_endpoint(Path(out_path), pub.endpoint)
    for v in range(int(first), int(last) + 1):
        pub.publish({"bias": np.array([v], np.float32)}, "trainable", policy_version=v)
        time.sleep(float(period_s))
    threading.Event().wait()  # serve until the test kills this process


if __name__ == "__main__":
    roles = {"learner": learner, "actor": actor, "publisher": publisher, "bias_publisher": bias_publisher}
    roles[sys.argv[1]](*sys.argv[2:])
