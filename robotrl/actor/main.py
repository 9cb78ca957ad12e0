"""Composition of the actor: one short function wires env, inference, timing and loop.

The same :func:`build_loop` serves the serial runner (policy in this process, virtual
time: unit tests, latency experiments) and the real one (policy in a worker process,
wall-clock time).
"""

from __future__ import annotations

import numpy as np

from robotrl.actor.latency import DelayEstimator, seconds_to_ticks
from robotrl.actor.loop import ControlLoop, LoopSettings
from robotrl.actor.queue import ActionQueue
from robotrl.actor.recorder import TransitionRecorder, TransitionSink
from robotrl.actor.timing import VirtualTimeScheduler, WallClockScheduler
from robotrl.config.actor import ActorConfig
from robotrl.core.clock import MonotonicClock, VirtualClock
from robotrl.core.protocols import InferenceBackend, LatencyModel, LoopObserver, RobotEnv


def build_loop(
    env: RobotEnv,
    backend: InferenceBackend,
    cfg: ActorConfig,
    horizon: int,
    latency: LatencyModel | None,
    sink: TransitionSink | None = None,
    batch_transitions: int = 64,
    max_prefix: int = 12,
    inference_timeout_s: float = 10.0,
    observer: LoopObserver | None = None,
) -> ControlLoop:
    """A control loop in virtual time when ``cfg.virtual_time`` (``latency`` required), else wall-clock."""
    spec = env.spec
    scheduler: VirtualTimeScheduler | WallClockScheduler
    if cfg.virtual_time:
        if latency is None:
            raise ValueError("virtual time needs a latency model (actor.latency)")
        clock: VirtualClock | MonotonicClock = VirtualClock()
        rng = np.random.default_rng(cfg.seed)
        scheduler = VirtualTimeScheduler(backend, latency, rng, spec.control_hz, inference_timeout_s)
        initial = seconds_to_ticks(cfg.latency.median_s, spec.control_hz)
    else:
        clock = MonotonicClock()
        scheduler = WallClockScheduler(backend, clock, spec.control_hz, inference_timeout_s)
        initial = 1
    queue = ActionQueue(spec.action_dim, horizon, cfg.strategy, cfg.blend_decay)
    estimator = DelayEstimator(cfg.delay_window, cfg.delay_quantile, initial)
    recorder = TransitionRecorder(cfg.actor_id, sink, batch_transitions)
    settings = LoopSettings(
        strategy=cfg.strategy,
        margin_ticks=cfg.margin_ticks,
        refresh_on_new_weights=cfg.refresh_on_new_weights,
        execution_horizon=cfg.execution_horizon,
        max_prefix=max_prefix,
        max_inference_errors=cfg.max_inference_errors,
        seed=cfg.seed,
    )
    return ControlLoop(env, scheduler, queue, estimator, clock, recorder, settings, observer)
