"""`robotrl bench learner`: RAPI updates per second, and ingest rate while updating.

Setup: the ``small`` built-in policy (``robotrl.policy.build_policy``), batch 256,
chunk 32, a 12-d state and two 96x96 RGB cameras, the real buffers and the real
learner loop with an in-process transition link. Three phases, each timed:

0. first fill: the ring written once (every memory-mapped page touched for the
   first time: disk-bound, reported apart);
1. ingest alone, steady state: 64-transition batches into the online buffer (the
   baseline);
2. updates alone: RAPI update groups (critic then actor updates, the configured
   4:1 ratio) on the filled buffers; ``updates_per_s`` counts critic and actor
   updates;
3. both: the learner loop runs update groups while a producer thread keeps its
   transition link full; ``ingest_tps`` is what the ingest thread stored.

The ratio of phase 3 to phase 1 ingest is what updating costs ingest. Target:
``ingest_tps >= 600`` (20 actors at 30 Hz with two cameras).
"""

from __future__ import annotations

import dataclasses
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from robotrl.bench.report import report
from robotrl.config.learner import LearnerConfig, RapiConfig
from robotrl.config.policy import PolicySize
from robotrl.config.schema import RobotRLConfig
from robotrl.core.batch import TransitionBatch
from robotrl.core.types import EnvSpec, WeightUpdate
from robotrl.learner.main import build_learner
from robotrl.learner.torch_utils import resolve_device
from robotrl.transport.inproc import TransitionQueue

BATCH_TRANSITIONS = 64
STATE_DIM = 12
IMAGE = (96, 96, 3)
CAMERAS = ("front", "wrist")
TARGET_TPS = 600

PolicyFactory = Callable[[RobotRLConfig, EnvSpec], Any]


def bench_spec() -> EnvSpec:
    return EnvSpec(
        "bench",
        action_names=tuple(f"a{i}" for i in range(6)),
        action_low=(-1.0,) * 6,
        action_high=(1.0,) * 6,
        state_names=tuple(f"s{i}" for i in range(STATE_DIM)),
        camera_shapes=dict.fromkeys(CAMERAS, IMAGE),
        max_episode_ticks=300,
    )


def synthetic_batch(rng: np.random.Generator, episode: int, first_tick: int, last: bool) -> TransitionBatch:
    """64 ticks of one episode, the last batch of an episode ending it with a next observation."""
    n = BATCH_TRANSITIONS
    zeros_f, zeros_b = np.zeros(n, np.float64), np.zeros(n, np.bool_)
    ends = np.zeros(n, np.bool_)
    ends[-1] = last
    m = int(last)
    action = rng.uniform(-1, 1, (n, 6)).astype(np.float32)
    return TransitionBatch(
        actor_id="actor-0",
        state=rng.standard_normal((n, STATE_DIM), dtype=np.float32),
        images={c: rng.integers(0, 256, (n, *IMAGE), dtype=np.uint8) for c in CAMERAS},
        action=action,
        proposed_action=action,
        reward=ends.astype(np.float32),
        terminated=zeros_b,
        truncated=ends,
        intervention=zeros_b,
        episode_id=np.full(n, episode, np.int64),
        tick=first_tick + np.arange(n, dtype=np.int64),
        chunk_id=(first_tick + np.arange(n)) // 8,
        index_in_chunk=(first_tick + np.arange(n)) % 8,
        policy_version=np.zeros(n, np.int64),
        delay_ticks=np.full(n, 4, np.int64),
        obs_time=zeros_f,
        action_time=zeros_f,
        obs_timestamp=zeros_f,
        instructions=("pick the cube",),
        instruction_index=np.zeros(n, np.int32),
        next_rows=np.array([n - 1] * m, np.int64),
        next_state=np.zeros((m, STATE_DIM), np.float32),
        next_images={c: np.zeros((m, *IMAGE), np.uint8) for c in CAMERAS},
        next_tick=np.array([first_tick + n] * m, np.int64),
        next_timestamp=np.zeros(m, np.float64),
    )


class Stream:
    """Endless batches of 4-batch episodes, made by re-stamping a few pre-built ones."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._pool = [synthetic_batch(rng, 0, k * BATCH_TRANSITIONS, k == 3) for k in range(4)]
        self._i = 0

    def next(self) -> TransitionBatch:
        base = self._pool[self._i % 4]
        episode = self._i // 4
        self._i += 1
        return dataclasses.replace(base, episode_id=np.full(BATCH_TRANSITIONS, episode, np.int64))


class _Discard:
    """A weight link that drops updates (a bench must not hold every version in memory)."""

    def __init__(self) -> None:
        self.sent = 0

    def send(self, item: WeightUpdate) -> bool:
        self.sent += 1
        return True

    def close(self) -> None:
        pass


def _default_policy(cfg: RobotRLConfig, spec: EnvSpec) -> Any:
    try:
        from robotrl.policy import build_policy
    except ImportError as exc:
        raise SystemExit(f"robotrl bench learner: needs the built-in policy package ({exc})") from exc

    return build_policy(cfg.policy, spec)


def run(quick: bool = False, policy_factory: PolicyFactory | None = None) -> dict[str, float | str]:
    seconds = 2.0 if quick else 15.0
    cfg = RobotRLConfig()
    cfg.policy.size = PolicySize.small
    cfg.policy.device = "auto"
    cfg.learner = LearnerConfig(
        batch_size=256,
        rapi=RapiConfig(critic_updates_per_group=4 if quick else 20, critic_warmup_updates=0),
        actor_updates_per_group=1 if quick else 5,
        learning_starts=1,
        online_capacity=8_192,
        anchor_capacity=2_000,
        checkpoint_every_groups=10**9,
        log_every_groups=10**9,
        resume=False,
    )
    spec = bench_spec()
    device = resolve_device(cfg.learner.device)
    policy = (policy_factory or _default_policy)(cfg, spec)
    inbox = TransitionQueue(maxsize=8)
    rng = np.random.default_rng(0)
    stream = Stream(rng)
    with tempfile.TemporaryDirectory(prefix="robotrl-bench-learner-") as tmp:
        cfg.run_dir = tmp
        learner = build_learner(cfg, policy, spec, inbox, _Discard(), console=False)
        try:
            # 0. first fill: every page of the memory-mapped images is written for the first time
            start, n = time.perf_counter(), 0
            while n < cfg.learner.online_capacity:
                learner.ingest(stream.next())
                n += BATCH_TRANSITIONS
            tps_first_fill = n / (time.perf_counter() - start)
            # 1. ingest alone, steady state (the ring overwrites its oldest rows)
            start, n = time.perf_counter(), 0
            while time.perf_counter() - start < seconds / 2:
                learner.ingest(stream.next())
                n += BATCH_TRANSITIONS
            tps_alone = n / (time.perf_counter() - start)
            # 2. updates alone, after one untimed group (optimiser state, kernel caches)
            learner.algorithm.update_group(learner.next_batch)
            groups, start = 0, time.perf_counter()
            per_group = cfg.learner.rapi.critic_updates_per_group + cfg.learner.actor_updates_per_group
            while groups == 0 or time.perf_counter() - start < seconds:
                learner.algorithm.update_group(learner.next_batch)
                groups += 1
            if device.type == "cuda":
                torch.cuda.synchronize()
            updates_per_s = groups * per_group / (time.perf_counter() - start)
            # 3. both: the real loop, its ingest thread fed by a producer thread
            stop = threading.Event()

            def produce() -> None:
                batch = stream.next()
                while not stop.is_set():
                    if inbox.send(batch):
                        batch = stream.next()
                    else:
                        time.sleep(0.0005)

            producer = threading.Thread(target=produce, daemon=True)
            producer.start()
            before, groups_before = learner.counters.transitions, learner.counters.groups
            start = time.perf_counter()
            timer = threading.Timer(seconds, learner.stop)  # updates stay in this thread, as in the role
            timer.start()
            learner.run()
            elapsed = time.perf_counter() - start
            timer.cancel()
            stop.set()
            producer.join(timeout=5)
            ingest_tps = (learner.counters.transitions - before) / elapsed
            both_updates = (learner.counters.groups - groups_before) * per_group / elapsed
        finally:
            learner.online.close()
            learner.anchor.close()
            if learner.metrics is not None:
                learner.metrics.close()
    n_params = sum(p.numel() for p in policy.parameters())
    result: dict[str, float | str] = {
        "bench": "learner",
        "updates_per_s": round(updates_per_s, 2),
        "ingest_tps": round(ingest_tps),
        "ingest_tps_alone": round(tps_alone),
        "ingest_tps_first_fill": round(tps_first_fill),
        "ratio_vs_alone": round(ingest_tps / tps_alone, 3),
        "updates_per_s_while_ingesting": round(both_updates, 2),
        "meets_target": float(ingest_tps >= TARGET_TPS),
        "device": device.type,
        "torch_threads": float(torch.get_num_threads()),
        "policy_params": float(n_params),
    }
    report(
        f"learner: RAPI at batch {cfg.learner.batch_size}, {n_params / 1e6:.1f}M-parameter policy on "
        f"{device.type}, two {IMAGE[0]}x{IMAGE[1]} cameras ({'quick' if quick else 'full'} run)",
        ["phase", "transitions/s", "updates/s"],
        [
            ["ingest, first fill of the ring", tps_first_fill, "-"],
            ["ingest alone", tps_alone, "-"],
            ["updates alone", "-", updates_per_s],
            ["ingest while updating", ingest_tps, both_updates],
        ],
        result,
    )
    return result
