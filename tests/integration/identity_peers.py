"""Actor processes for the identity tests:
`python identity_peers.py actor ENDPOINT ID N PERIOD_S SPOOL [KEYS_DIR KEY_OF]`.

Sends up to N batches, one every PERIOD_S, with write-ahead to SPOOL_DIR (as the actor role
does), stops early once fenced, waits for the learner (so a spool left by an earlier process is
loaded and sent) and then for its acks (or the fence), and prints its stats as JSON. With
KEYS_DIR it speaks CURVE with the pair of actor KEY_OF (which need not be ID).
"""

from __future__ import annotations

import json
import sys
import threading
import time

from transport_peers import HEARTBEAT_S, TIMEOUT_S, small_batch

from robotrl.transport.transitions import TransitionSender
from robotrl.wire.auth import client_keys


def actor(
    endpoint: str, actor_id: str, n: str, period_s: str, spool_dir: str, keys_dir: str = "", key_of: str = ""
) -> None:
    tx = TransitionSender(
        endpoint,
        actor_id,
        spool_dir=spool_dir,
        write_ahead=True,
        max_inflight=8,
        window=4,
        heartbeat_s=HEARTBEAT_S,
        peer_timeout_s=TIMEOUT_S,
        keys=client_keys(keys_dir, key_of) if keys_dir else None,
    )
    pause = threading.Event()  # never set: a paced loop, not a test's wait
    for i in range(int(n)):
        if tx.stats()["fenced"]:
            break
        tx.send(small_batch(actor_id, i))
        pause.wait(float(period_s))
    deadline = time.monotonic() + 60.0
    while not (tx.stats()["learner_alive"] or tx.stats()["fenced"]) and time.monotonic() < deadline:
        pause.wait(0.02)
    flushed = tx.flush(120.0)
    stats = tx.stats()
    stats["flushed"] = flushed
    print(json.dumps(stats), flush=True)
    tx.close()


if __name__ == "__main__":
    roles = {"actor": actor}
    roles[sys.argv[1]](*sys.argv[2:])
