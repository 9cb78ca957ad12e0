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
from robotrl.core.types import EnvSpec
from robotrl.learner.loop import Learner
from robotrl.learner.main import build_learner
from robotrl.learner.torch_utils import resolve_device
from robotrl.transport.inproc import DroppedWeights, TransitionQueue

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
    ends = np.zeros(n, np.bool_)
    ends[-1] = last
    action = rng.uniform(-1, 1, (n, 6)).astype(np.float32)
    ticks = first_tick + np.arange(n)
    columns = {
        "state": rng.standard_normal((n, STATE_DIM), dtype=np.float32),
        "action": action,
        "proposed_action": action,
        "reward": ends.astype(np.float32),
        "truncated": ends,
        "episode_id": np.full(n, episode, np.int64),
        "tick": ticks,
        "chunk_id": ticks // 8,
        "index_in_chunk": ticks % 8,
        "policy_version": np.zeros(n, np.int64),
        "delay_ticks": np.full(n, 4, np.int64),
    }
    images = {c: rng.integers(0, 256, (n, *IMAGE), dtype=np.uint8) for c in CAMERAS}
    batch = TransitionBatch.of("actor-0", columns, images, ("pick the cube",))
    if not last:
        return batch
    next_images = {c: np.zeros((1, *IMAGE), np.uint8) for c in CAMERAS}
    return batch.ending_with({"state": np.zeros((1, STATE_DIM)), "tick": [first_tick + n]}, next_images)


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


def _default_policy(cfg: RobotRLConfig, spec: EnvSpec) -> Any:
    try:
        from robotrl.policy import build_policy
    except ImportError as exc:
        raise SystemExit(f"robotrl bench learner: needs the built-in policy package ({exc})") from exc

    return build_policy(cfg.policy, spec)


def bench_config(quick: bool) -> RobotRLConfig:
    """The small policy at batch 256 with the configured 4:1 critic-to-actor ratio, never
    checkpointing or logging (what is timed is updates and ingest)."""
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
    return cfg


@dataclasses.dataclass
class Rates:
    """What the phases measured."""

    tps_first_fill: float
    tps_alone: float
    updates_per_s: float
    ingest_tps: float
    both_updates: float


def _ingest_rate(learner: Learner, stream: Stream, done: Callable[[float, int], bool]) -> float:
    """Transitions per second of ``learner.ingest`` alone until ``done(elapsed_s, transitions)``."""
    start, n = time.perf_counter(), 0
    while not done(time.perf_counter() - start, n):
        learner.ingest(stream.next())
        n += BATCH_TRANSITIONS
    return n / (time.perf_counter() - start)


def _update_rate(learner: Learner, seconds: float, per_group: int, device: torch.device) -> float:
    """Updates per second of update groups alone, after one untimed group (optimiser state,
    kernel caches)."""
    learner.algorithm.update_group(learner.next_batch)
    groups, start = 0, time.perf_counter()
    while groups == 0 or time.perf_counter() - start < seconds:
        learner.algorithm.update_group(learner.next_batch)
        groups += 1
    if device.type == "cuda":
        torch.cuda.synchronize()
    return groups * per_group / (time.perf_counter() - start)


def _both_rates(
    learner: Learner, inbox: TransitionQueue, stream: Stream, seconds: float, per_group: int
) -> tuple[float, float]:
    """(transitions/s, updates/s) of the real loop, its ingest thread fed by a producer thread."""
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
    return ingest_tps, (learner.counters.groups - groups_before) * per_group / elapsed


def _measure(cfg: RobotRLConfig, policy: Any, spec: EnvSpec, seconds: float) -> Rates:
    """The four phases on a learner in a temporary run folder."""
    device = resolve_device(cfg.learner.device)
    per_group = cfg.learner.rapi.critic_updates_per_group + cfg.learner.actor_updates_per_group
    inbox = TransitionQueue(maxsize=8)
    stream = Stream(np.random.default_rng(0))
    with tempfile.TemporaryDirectory(prefix="robotrl-bench-learner-") as tmp:
        cfg.run_dir = tmp
        learner = build_learner(cfg, policy, spec, inbox, DroppedWeights(), console=False)
        try:
            capacity = cfg.learner.online_capacity
            # 0. first fill: every page of the memory-mapped images is written for the first time
            first_fill = _ingest_rate(learner, stream, lambda _s, n: n >= capacity)
            # 1. ingest alone, steady state (the ring overwrites its oldest rows)
            alone = _ingest_rate(learner, stream, lambda s, _n: s >= seconds / 2)
            updates = _update_rate(learner, seconds, per_group, device)
            ingest_tps, both_updates = _both_rates(learner, inbox, stream, seconds, per_group)
        finally:
            learner.online.close()
            learner.anchor.close()
            if learner.metrics is not None:
                learner.metrics.close()
    return Rates(first_fill, alone, updates, ingest_tps, both_updates)


def run(quick: bool = False, policy_factory: PolicyFactory | None = None) -> dict[str, float | str]:
    seconds = 2.0 if quick else 15.0
    cfg = bench_config(quick)
    spec = bench_spec()
    device = resolve_device(cfg.learner.device)
    policy = (policy_factory or _default_policy)(cfg, spec)
    rates = _measure(cfg, policy, spec, seconds)
    n_params = sum(p.numel() for p in policy.parameters())
    result: dict[str, float | str] = {
        "bench": "learner",
        "updates_per_s": round(rates.updates_per_s, 2),
        "ingest_tps": round(rates.ingest_tps),
        "ingest_tps_alone": round(rates.tps_alone),
        "ingest_tps_first_fill": round(rates.tps_first_fill),
        "ratio_vs_alone": round(rates.ingest_tps / rates.tps_alone, 3),
        "updates_per_s_while_ingesting": round(rates.both_updates, 2),
        "meets_target": float(rates.ingest_tps >= TARGET_TPS),
        "device": device.type,
        "torch_threads": float(torch.get_num_threads()),
        "policy_params": float(n_params),
    }
    report(
        f"learner: RAPI at batch {cfg.learner.batch_size}, {n_params / 1e6:.1f}M-parameter policy on "
        f"{device.type}, two {IMAGE[0]}x{IMAGE[1]} cameras ({'quick' if quick else 'full'} run)",
        ["phase", "transitions/s", "updates/s"],
        [
            ["ingest, first fill of the ring", rates.tps_first_fill, "-"],
            ["ingest alone", rates.tps_alone, "-"],
            ["updates alone", "-", rates.updates_per_s],
            ["ingest while updating", rates.ingest_tps, rates.both_updates],
        ],
        result,
    )
    return result
