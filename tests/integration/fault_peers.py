"""Peer processes for the fault-injection tests: `python fault_peers.py ROLE ...`.

- ``learner RUN_DIR T_ENDPOINT W_ENDPOINT``: the real learner composition
  (:func:`robotrl.learner.main.build_learner`, the real ZeroMQ links of
  ``_open_links``; buffers in checkpoints and the write-ahead journal as the default
  learner config has them) with a small MLP policy, so a test can SIGKILL it and start it
  again on the same run folder.
  SIGTERM stops it cleanly (a final checkpoint).
- ``actor T_ENDPOINT ACTOR_ID FIRST N PERIOD_S SPOOL_DIR``: send episodes FIRST ..
  FIRST+N-1 (10 ticks each, one batch per episode) with the write-ahead spool, wait
  until every batch is acknowledged, print the sender's stats as JSON.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from learner_doubles import MLPChunkPolicy, episode_batch, small_learner_config, toy_spec

from robotrl.config.learner import RapiConfig
from robotrl.config.schema import RobotRLConfig
from robotrl.learner.main import _open_links, build_learner
from robotrl.transport.transitions import TransitionSender

HEARTBEAT_S = 0.2
TIMEOUT_S = 1.0
TICKS = 10
SPEC = toy_spec()


def learner_config(run_dir: str, t_endpoint: str, w_endpoint: str) -> RobotRLConfig:
    cfg = small_learner_config(
        run_dir,
        RapiConfig(
            critic_hidden=16, critic_updates_per_group=1, critic_warmup_updates=0, critic_images=False
        ),
        online_capacity=5000,
        log_every_groups=1000,
        checkpoint_every_groups=3,
        max_samples_per_insert=2.0,  # a few groups per batch: the CPU stays with the actor
    )  # buffers in checkpoints and the journal: the default, not set here
    t = cfg.transport
    t.transitions_endpoint, t.weights_endpoint = t_endpoint, w_endpoint
    t.heartbeat_s, t.peer_timeout_s = HEARTBEAT_S, TIMEOUT_S
    return cfg


def learner(run_dir: str, t_endpoint: str, w_endpoint: str) -> None:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    torch.set_num_threads(1)
    cfg = learner_config(run_dir, t_endpoint, w_endpoint)
    transitions, weights = _open_links(cfg)
    lrn = build_learner(cfg, MLPChunkPolicy(2, 4, 3, hidden=16), SPEC, transitions, weights, console=False)
    signal.signal(signal.SIGTERM, lambda *_: lrn.stop())
    try:
        lrn.run()
    finally:
        transitions.close()
        weights.close()


def actor(endpoint: str, actor_id: str, first: str, n: str, period_s: str, spool_dir: str) -> None:
    tx = TransitionSender(
        endpoint,
        actor_id,
        spool_dir=spool_dir,
        write_ahead=True,
        max_inflight=8,
        window=4,
        heartbeat_s=HEARTBEAT_S,
        peer_timeout_s=TIMEOUT_S,
    )
    rewards = np.zeros(TICKS)
    for ep in range(int(first), int(first) + int(n)):
        batch = episode_batch(actor_id, ep, range(TICKS), end="terminated", rewards=rewards)
        assert tx.send(batch)
        time.sleep(float(period_s))
    stats = tx.stats()
    stats["flushed"] = tx.flush(120.0)
    stats.update(tx.stats())
    print(json.dumps(stats), flush=True)
    tx.close()


if __name__ == "__main__":
    roles = {"learner": learner, "actor": actor}
    roles[sys.argv[1]](*sys.argv[2:])
