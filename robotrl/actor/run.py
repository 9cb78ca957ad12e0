"""Episodes of the simulated (or real) robot under a policy, a strategy and a latency model,
with a progress bar, ended by Ctrl-C at the next tick (the arm holds), and their summary.

Virtual time runs the serial runner (policy in this process, latency from the model);
wall-clock time runs the policy in a worker process so the control loop keeps its own
interpreter (:func:`robotrl.actor.compose.make_backend`).
"""

from __future__ import annotations

import itertools
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from robotrl.actor.compose import ActorParts, compose_actor, loop_priority
from robotrl.actor.loop import EpisodeResult
from robotrl.actor.realtime import check_realtime, realtime_thread
from robotrl.actor.recorder import TransitionSink
from robotrl.actor.report import chunk_too_short, summarize
from robotrl.config.schema import RobotRLConfig
from robotrl.core.protocols import LoopObserver
from robotrl.core.run_folder import EvalSummary

log = logging.getLogger(__name__)


def run_episodes(
    cfg: RobotRLConfig,
    sink: TransitionSink | None,
    title: str,
    online: bool = False,
    on_episode: Callable[[Sequence[EpisodeResult]], None] | None = None,
    observer: LoopObserver | None = None,
) -> EvalSummary:
    """Run ``cfg.actor.episodes`` episodes (0: until stopped) with progress; return the summary.

    ``on_episode`` sees the results so far after every episode (progress for a supervisor);
    ``observer`` watches every tick and chunk (a rerun recording).
    """
    check_realtime(loop_priority(cfg))
    parts = compose_actor(cfg, sink, online, observer)
    spec = parts.env.spec
    results: list[EpisodeResult] = []
    start = time.perf_counter()
    try:
        _run_with_progress(cfg, parts, title, results, on_episode)
    finally:
        recorded = parts.close()
        if parts.recording is not None:
            path = parts.recording.path
            print(f"rerun recording written to {path} (open it with: rerun {path})", file=sys.stderr)
    summary = summarize(results, spec.control_hz, wall_clock=not cfg.actor.virtual_time)
    summary["env"] = spec.name if cfg.hardware.robot_type is not None else cfg.env.id
    summary["strategy"] = cfg.actor.strategy.value
    summary["latency"] = cfg.actor.latency.kind.value if cfg.actor.virtual_time else "wall-clock"
    summary["wall_s"] = round(time.perf_counter() - start, 2)
    _add_findings(cfg, parts, summary, recorded)
    return summary


def _run_with_progress(
    cfg: RobotRLConfig,
    parts: ActorParts,
    title: str,
    results: list[EpisodeResult],
    on_episode: Callable[[Sequence[EpisodeResult]], None] | None,
) -> None:
    """The episodes, appended to ``results`` as they end; Ctrl-C ends the episode at the next
    tick (the arm holds), then stops; an episode that failed stops too."""
    loop = parts.loop
    stop = threading.Event()

    def on_interrupt(*_: object) -> None:
        stop.set()
        loop.request_stop()

    previous = signal.signal(signal.SIGINT, on_interrupt)
    columns = (TextColumn(title), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[status]}"))
    try:
        with Progress(*columns, TimeElapsedColumn(), console=Console(stderr=True)) as progress:
            task = progress.add_task(title, total=cfg.actor.episodes or None, status="")
            with realtime_thread(loop_priority(cfg)):
                _episodes(cfg, parts, progress, task, stop, results, on_episode)
    finally:
        signal.signal(signal.SIGINT, previous)


def _episodes(
    cfg: RobotRLConfig,
    parts: ActorParts,
    progress: Progress,
    task: TaskID,
    stop: threading.Event,
    results: list[EpisodeResult],
    on_episode: Callable[[Sequence[EpisodeResult]], None] | None,
) -> None:
    """Episodes until the configured number, a stop or a failure."""
    loop, pace = parts.loop, parts.pace
    total = cfg.actor.episodes or None
    for i in itertools.count() if total is None else range(total):
        if stop.is_set():
            break
        if pace is not None and not pace.gave_up and pace.wanted(i) > parts.backend.newest_version():
            progress.update(task, status=f"waiting for the learner's v{pace.wanted(i)}")
            pace.before_episode(i, stop)
            if stop.is_set():
                break
        result = loop.run_episode(i, seed=cfg.actor.seed + i)
        results.append(result)
        wins = sum(r.success for r in results)
        progress.update(task, advance=1, status=f"success {wins}/{len(results)}")
        if on_episode is not None:
            on_episode(results)
        if result.failure:
            log.error("episode %d stopped: %s", i, result.failure)
            break


def _add_findings(
    cfg: RobotRLConfig, parts: ActorParts, summary: EvalSummary, recorded: dict[str, Any] | None
) -> None:
    """What the figures alone do not say: a chunk too short for the delay, a real arm's safety
    report, the dataset recorded."""
    diagnosis = chunk_too_short(summary["p90_delay_ticks"], parts.horizon, cfg.actor.margin_ticks)
    if diagnosis is not None and summary["starved_ticks"]:
        summary["diagnosis"] = diagnosis
        log.warning("%s", diagnosis)
    report = getattr(parts.env, "report", None)  # a real arm: every safety clamp, hold and stop, counted
    if callable(report):
        summary["arm"] = report()
    if recorded is not None:
        summary["dataset"] = recorded
        print(
            f"episodes recorded as a LeRobotDataset in {recorded['path']} ({recorded['episodes']} "
            f"episodes, {recorded['frames']} frames, {recorded['dropped_frames']} dropped)",
            file=sys.stderr,
        )
