"""`robotrl bench learner`: RAPI updates per second, alone, beside a 30 Hz actor and beside
full-speed ingest.

Setup (the image-encoder variant, the only one): the ``small`` built-in flow policy built
for two 96x96 RGB cameras (its ``KeypointEncoder`` reads both) and RAPI's critic with
``learner.rapi.critic_images`` on (its encoder reads both too), batch 256, chunk 32, a 12-d
state, the real buffers and the real learner loop (ingest thread, journal, update guard,
publishing) with an in-process transition link. Phases, each timed:

0. first fill: the ring written once (every memory-mapped page touched for the
   first time: disk-bound, reported apart);
1. ingest alone, steady state: 64-transition batches into the online buffer (the
   baseline);
2. update groups alone: RAPI update groups (critic then actor updates, the configured
   4:1 ratio) on the filled buffers, outside the loop; ``updates_per_s`` counts critic
   and actor updates;
3. the loop alone (``updates_per_s_alone``): the same groups in the real loop, its link
   idle: the baseline of the two ratios below;
4. the loop beside one actor at 30 Hz (``updates_per_s_with_30hz_actor``, ``ingest_tps_30hz``):
   a :class:`~robotrl.bench.pacing.PacedActor` sends two-camera transitions at a robot's
   real-time rate into the same link phase 5 fills, so ``ratio_30hz_actor`` is what one
   real actor costs the learner (target: at least 0.9);
5. the loop beside full-speed ingest (``updates_per_s_while_ingesting``, ``ingest_tps``):
   a producer thread keeps the link full; ``ratio_full_speed_ingest`` is what ingesting as
   fast as possible costs updates, and ``ingest_tps`` vs phase 1 what updating costs ingest.
   This phase runs without the journal: at full speed it fills its disk budget
   (``learner.journal_max_mb``) within a group, long before the next checkpoint empties it,
   and then refuses every batch, so the phase would time updates beside no ingest at all.
   ``journal_refusals`` counts the batches any phase's journal refused (0 in a sound run).

Loop phases are timed between update groups' ends (:mod:`robotrl.bench.group_timer`).
``headline_ratio`` is the weaker of the two update ratios. Ingest target:
``ingest_tps >= 600`` (20 actors at 30 Hz with two cameras).
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from robotrl.bench.group_timer import GroupTimer
from robotrl.bench.pacing import PacedActor
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
EPISODE_TICKS = 4 * BATCH_TRANSITIONS
ACTOR_HZ = 30.0
PACED_BATCH = 8
"""Transitions per batch of the 30 Hz actor: finer than the wire's default (64, one batch every
2.1 s), so its rate is steady over a quick run's seconds; per-batch costs (journal file, fsync,
admission) come 8 times as often, so it is the harsher load."""
TARGET_RATIO_30HZ = 0.9
MIN_LOOP_GROUPS = 3
"""Group-to-group intervals a loop phase times at least, whatever its seconds."""

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


def synthetic_batch(
    rng: np.random.Generator,
    episode: int,
    first_tick: int,
    last: bool,
    n: int = BATCH_TRANSITIONS,
    actor_id: str = "actor-0",
) -> TransitionBatch:
    """``n`` ticks of one episode, the last batch of an episode ending it with a next observation."""
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
    batch = TransitionBatch.of(actor_id, columns, images, ("pick the cube",))
    if not last:
        return batch
    next_images = {c: np.zeros((1, *IMAGE), np.uint8) for c in CAMERAS}
    return batch.ending_with({"state": np.zeros((1, STATE_DIM)), "tick": [first_tick + n]}, next_images)


class Stream:
    """Endless batches of one actor's ``EPISODE_TICKS``-tick episodes, ``n`` ticks a batch, made by
    re-stamping one episode's pre-built batches."""

    def __init__(
        self, rng: np.random.Generator, n: int = BATCH_TRANSITIONS, actor_id: str = "actor-0"
    ) -> None:
        per_episode = EPISODE_TICKS // n
        self._pool = [
            synthetic_batch(rng, 0, k * n, k == per_episode - 1, n, actor_id) for k in range(per_episode)
        ]
        self._n = n
        self._i = 0

    def next(self) -> TransitionBatch:
        base = self._pool[self._i % len(self._pool)]
        episode = self._i // len(self._pool)
        self._i += 1
        return dataclasses.replace(base, episode_id=np.full(self._n, episode, np.int64))


def _default_policy(cfg: RobotRLConfig, spec: EnvSpec) -> Any:
    try:
        from robotrl.policy import build_policy
    except ImportError as exc:
        raise SystemExit(f"robotrl bench learner: needs the built-in policy package ({exc})") from exc

    return build_policy(cfg.policy, spec)


def bench_config(quick: bool) -> RobotRLConfig:
    """The small policy at batch 256 with the configured 4:1 critic-to-actor ratio, the critic
    reading the cameras, never checkpointing or logging (what is timed is updates and ingest)."""
    cfg = RobotRLConfig()
    cfg.policy.size = PolicySize.small
    cfg.policy.device = "auto"
    cfg.learner = LearnerConfig(
        batch_size=256,
        rapi=RapiConfig(
            critic_updates_per_group=4 if quick else 20, critic_warmup_updates=0, critic_images=True
        ),
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
class LoopRates:
    """What one phase of the real loop measured, over whole group-to-group intervals."""

    updates_per_s: float
    ingest_tps: float
    groups: int
    window_s: float
    journal_refusals: int


@dataclasses.dataclass
class Rates:
    """What the phases measured."""

    tps_first_fill: float
    tps_alone: float
    updates_per_s: float
    alone: LoopRates
    actor_30hz: LoopRates
    full_speed: LoopRates
    actor_max_late_s: float


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


def _loop_phase(
    learner: Learner,
    seconds: float,
    per_group: int,
    load: PacedActor[TransitionBatch] | None = None,
    *,
    journal: bool = True,
) -> LoopRates:
    """The real loop (ingest thread, journal unless ``journal`` is false, update guard,
    publishing) on ``learner``'s algorithm, buffers and link for ``seconds`` of whole groups,
    ``load`` sending into the link meanwhile. A fresh :class:`Learner` per phase: a stopped one
    stays stopped."""

    def stop() -> None:
        loop.stop()

    timer = GroupTimer(
        learner.algorithm, stop, lambda: learner.counters.transitions, seconds, MIN_LOOP_GROUPS
    )
    loop = Learner(
        timer,
        learner.online,
        learner.anchor,
        learner.cfg,
        learner.transitions,
        learner.weights,
        journal=learner.journal if journal else None,
        counters=learner.counters,
        admission=learner.admission,
        prefetch=learner.prefetch,
    )
    sender = threading.Thread(target=load.run, name="bench-actor", daemon=True) if load else None
    if sender is not None:
        sender.start()
    try:
        loop.run()  # updates stay in this thread, as in the role
    finally:
        if load is not None and sender is not None:
            load.stop()
            sender.join(timeout=5)
    return LoopRates(
        timer.groups_per_s() * per_group,
        timer.transitions_per_s(),
        len(timer.ends) - 1,
        timer.window_s,
        loop.journal_refusals.total,
    )


def _measure(cfg: RobotRLConfig, policy: Any, spec: EnvSpec, seconds: float) -> tuple[Rates, int]:
    """The phases on a learner in a temporary run folder; and how many cameras its critic reads."""
    device = resolve_device(cfg.learner.device)
    per_group = cfg.learner.rapi.critic_updates_per_group + cfg.learner.actor_updates_per_group
    inbox = TransitionQueue(maxsize=8)
    stream = Stream(np.random.default_rng(0))
    with tempfile.TemporaryDirectory(prefix="robotrl-bench-learner-") as tmp:
        cfg.run_dir = tmp
        learner = build_learner(cfg, policy, spec, inbox, DroppedWeights(), console=False)
        critic = getattr(learner.algorithm, "critic", None)
        critic_cameras = len(critic.encoder.cameras) if critic is not None else 0
        try:
            capacity = cfg.learner.online_capacity
            # 0. first fill: every page of the memory-mapped images is written for the first time
            first_fill = _ingest_rate(learner, stream, lambda _s, n: n >= capacity)
            # 1. ingest alone, steady state (the ring overwrites its oldest rows)
            alone = _ingest_rate(learner, stream, lambda s, _n: s >= seconds / 2)
            updates = _update_rate(learner, seconds, per_group, device)
            loop_alone = _loop_phase(learner, seconds, per_group)
            actor = PacedActor(
                inbox.send,
                Stream(np.random.default_rng(1), PACED_BATCH, "actor-30hz").next,
                ACTOR_HZ,
            )
            with_actor = _loop_phase(learner, seconds, per_group, actor)
            inbox.drain()
            producer = PacedActor(inbox.send, stream.next, math.inf, retry_s=0.0005)
            full_speed = _loop_phase(learner, seconds, per_group, producer, journal=False)
        finally:
            learner.online.close()
            learner.anchor.close()
            if learner.metrics is not None:
                learner.metrics.close()
    rates = Rates(first_fill, alone, updates, loop_alone, with_actor, full_speed, actor.max_late_s)
    return rates, critic_cameras


def _ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b > 0 else 0.0


def run(quick: bool = False, policy_factory: PolicyFactory | None = None) -> dict[str, float | str]:
    seconds = 2.0 if quick else 15.0
    cfg = bench_config(quick)
    spec = bench_spec()
    device = resolve_device(cfg.learner.device)
    policy = (policy_factory or _default_policy)(cfg, spec)
    rates, critic_cameras = _measure(cfg, policy, spec, seconds)
    n_params = sum(p.numel() for p in policy.parameters())
    alone, actor, full = rates.alone, rates.actor_30hz, rates.full_speed
    ratios = {
        "ratio_30hz_actor": _ratio(actor.updates_per_s, alone.updates_per_s),
        "ratio_full_speed_ingest": _ratio(full.updates_per_s, alone.updates_per_s),
    }
    weaker = min(ratios, key=lambda k: ratios[k])
    result: dict[str, float | str] = {
        "bench": "learner",
        "headline_ratio": ratios[weaker],
        "headline": weaker,
        "updates_per_s": round(rates.updates_per_s, 2),
        "updates_per_s_alone": round(alone.updates_per_s, 2),
        "updates_per_s_with_30hz_actor": round(actor.updates_per_s, 2),
        "updates_per_s_while_ingesting": round(full.updates_per_s, 2),
        **ratios,
        "ingest_tps_30hz": round(actor.ingest_tps, 1),
        "actor_30hz_max_late_s": round(rates.actor_max_late_s, 3),
        "ingest_tps": round(full.ingest_tps),
        "ingest_tps_alone": round(rates.tps_alone),
        "ingest_tps_first_fill": round(rates.tps_first_fill),
        "ratio_vs_alone": _ratio(full.ingest_tps, rates.tps_alone),
        "meets_target": float(full.ingest_tps >= TARGET_TPS),
        "meets_30hz_target": float(ratios["ratio_30hz_actor"] >= TARGET_RATIO_30HZ),
        "groups_timed": float(min(alone.groups, actor.groups, full.groups)),
        "journal_refusals": float(alone.journal_refusals + actor.journal_refusals + full.journal_refusals),
        "device": device.type,
        "torch_threads": float(torch.get_num_threads()),
        "policy_params": float(n_params),
        "policy_cameras": float(len(getattr(policy, "cameras", ()))),
        "critic_cameras": float(critic_cameras),
    }
    report(
        f"learner: RAPI at batch {cfg.learner.batch_size}, {n_params / 1e6:.1f}M-parameter policy on "
        f"{device.type}, two {IMAGE[0]}x{IMAGE[1]} cameras ({'quick' if quick else 'full'} run)",
        ["phase", "transitions/s", "updates/s"],
        [
            ["ingest, first fill of the ring", rates.tps_first_fill, "-"],
            ["ingest alone", rates.tps_alone, "-"],
            ["update groups alone", "-", rates.updates_per_s],
            ["loop alone", alone.ingest_tps, alone.updates_per_s],
            [f"loop, one {ACTOR_HZ:.0f} Hz actor", actor.ingest_tps, actor.updates_per_s],
            ["loop, ingest at full speed", full.ingest_tps, full.updates_per_s],
        ],
        result,
    )
    return result
