"""`robotrl eval` and `robotrl actor`: episodes of the simulated (or real) robot under a
policy, a strategy and a latency model, with progress, a summary table and JSON.

Virtual time runs the serial runner (policy in this process, latency from the model);
wall-clock time runs the policy in a worker process so the control loop keeps its own
interpreter.
"""

from __future__ import annotations

import itertools
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from robotrl.actor.inference import InProcessInference
from robotrl.actor.loop import EpisodeResult
from robotrl.actor.main import build_loop
from robotrl.actor.pace import LearnerPace
from robotrl.actor.recorder import TransitionSink
from robotrl.actor.report import chunk_too_short, episode_rows, outcome_text, summarize
from robotrl.actor.slots import PolicySlots
from robotrl.actor.worker import ProcessInference, WorkerSpec
from robotrl.config.policy import PolicyConfig, PolicyKind
from robotrl.config.schema import RobotRLConfig
from robotrl.config.transport import TransportConfig
from robotrl.core.protocols import ChunkPolicy, InferenceBackend, LoopObserver, RobotEnv, WeightSource
from robotrl.core.types import EnvSpec, Transition

log = logging.getLogger(__name__)

EVAL_SUMMARY = "eval_summary.json"
EVAL_EPISODES = "eval_episodes.jsonl"


def make_policy(policy_cfg: PolicyConfig, spec: EnvSpec) -> ChunkPolicy:
    """The configured policy: a checkpoint from ``policy.path`` (any architecture, run with the
    config's inference settings), else a fresh one."""
    from robotrl.policy import build_policy, load_policy
    from robotrl.policy.factory import apply_inference_settings

    if policy_cfg.path:
        policy = load_policy(policy_cfg.path, device=policy_cfg.device)
        apply_inference_settings(policy, policy_cfg)
        _warn_if_not_as_configured(policy, policy_cfg)
        return policy
    return build_policy(policy_cfg, spec)


def _warn_if_not_as_configured(policy: ChunkPolicy, cfg: PolicyConfig) -> None:
    """The checkpoint decides what runs; say so when it is not the size or horizon the config
    names, since reports and tables name the config's."""
    from robotrl.policy.flow import FlowChunkPolicy

    if not isinstance(policy, FlowChunkPolicy) or cfg.kind is not PolicyKind.flow:
        return
    if (policy.cfg.size, policy.horizon) != (cfg.size, cfg.horizon):
        log.warning(
            "policy.path=%s holds a %s flow policy of horizon %d; it runs as saved, not as the "
            "config's %s of horizon %d (set policy.size and policy.horizon to match)",
            cfg.path,
            policy.cfg.size.value,
            policy.horizon,
            cfg.size.value,
            cfg.horizon,
        )


def policy_for_worker(policy: dict[str, Any], spec: dict[str, Any]) -> ChunkPolicy:
    """Worker-side factory: rebuild the config objects from JSON, then :func:`make_policy`."""
    from omegaconf import OmegaConf

    policy_cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(PolicyConfig), policy))
    assert isinstance(policy_cfg, PolicyConfig)
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in spec.items()}
    fields["camera_shapes"] = {cam: tuple(shape) for cam, shape in spec.get("camera_shapes", {}).items()}
    env_spec = EnvSpec(**fields)
    return make_policy(policy_cfg, env_spec)


def subscriber_for_worker(transport: dict[str, Any]) -> WeightSource:
    """Worker-side factory of the weight subscriber (the worker owns the policy's weights)."""
    from omegaconf import OmegaConf

    from robotrl.transport.weight_subscriber import WeightSubscriber

    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TransportConfig), transport))
    assert isinstance(cfg, TransportConfig)
    return WeightSubscriber.from_config(cfg)


def make_backend(cfg: RobotRLConfig, spec: EnvSpec, online: bool) -> tuple[InferenceBackend, int, int]:
    """The inference backend for the configured mode, the policy's horizon, and the longest
    committed prefix to give it (see :func:`max_prefix`).

    ``online``: new weights come from the learner's weight link, installed between inferences.
    """
    from robotrl.policy import inference_threads
    from robotrl.policy.factory import trained_max_delay

    if cfg.actor.virtual_time:
        import torch

        torch.set_num_threads(inference_threads())
        policies = []
        for _ in range(2):  # both slots start identical (a fresh policy's random weights too)
            torch.manual_seed(cfg.seed)
            policies.append(make_policy(cfg.policy, spec))
        slots = PolicySlots(policies[0], policies[1], zero_copy=True)  # updates are the subscriber's own
        weights = None
        if online:
            from robotrl.transport.weight_subscriber import WeightSubscriber

            weights = WeightSubscriber.from_config(cfg.transport)
        trained = trained_max_delay(slots.active)
        return InProcessInference(slots, weights), slots.active.horizon, max_prefix(cfg.policy, trained)
    from omegaconf import OmegaConf

    policy_json = OmegaConf.to_container(OmegaConf.structured(cfg.policy), enum_to_str=True)
    transport_json = OmegaConf.to_container(OmegaConf.structured(cfg.transport), enum_to_str=True)
    spec_json = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(spec).items()}
    worker_spec = WorkerSpec(
        "robotrl.actor.run:policy_for_worker",
        {"policy": policy_json, "spec": spec_json},
        weights_factory="robotrl.actor.run:subscriber_for_worker" if online else None,
        weights_kwargs={"transport": transport_json} if online else {},
        torch_threads=inference_threads(),
    )
    backend = ProcessInference(worker_spec)
    trained = backend.info.max_delay
    cap = max_prefix(cfg.policy, None if trained < 0 else trained)
    return backend, backend.info.horizon, cap


def max_prefix(policy_cfg: PolicyConfig, trained: int | None) -> int:
    """The actor commits at most this many planned actions as a new chunk's prefix: what the
    checkpoint was trained to continue when it says (prefix conditioning holds only within
    the delays seen in training), else ``policy.max_delay``."""
    if trained is None or trained == policy_cfg.max_delay:
        return policy_cfg.max_delay
    log.warning(
        "policy.max_delay=%d, but the checkpoint was trained with prefixes up to %d: using %d",
        policy_cfg.max_delay,
        trained,
        trained,
    )
    return trained


def run_episodes(
    cfg: RobotRLConfig,
    sink: TransitionSink | None,
    title: str,
    online: bool = False,
    on_episode: Callable[[Sequence[EpisodeResult]], None] | None = None,
    observer: LoopObserver | None = None,
) -> dict[str, Any]:
    """Run ``cfg.actor.episodes`` episodes (0: until stopped) with progress; return the summary.

    ``on_episode`` sees the results so far after every episode (progress for a supervisor);
    ``observer`` watches every tick and chunk (a rerun recording).
    """
    from robotrl.sim import make_env
    from robotrl.sim.latency import build_latency_model

    if cfg.hardware.robot_type is not None:
        from robotrl.hardware.factory import make_hardware_env

        env: RobotEnv = make_hardware_env(cfg)
    else:
        env = make_env(cfg.env)
    spec = env.spec
    if not cfg.policy.path:
        log.warning("policy.path is not set: running a policy with random weights")
    dataset = None  # the LeRobotDataset actor.record_dataset asks for
    if cfg.actor.record_dataset:
        from robotrl.actor.dataset import DatasetRecorder

        dataset = DatasetRecorder(
            cfg.actor.record_dataset,
            spec,
            seed_base=cfg.actor.seed,
            block=cfg.actor.virtual_time,  # virtual time: waiting costs nothing, so nothing is dropped
            video=cfg.actor.record_video,
            overwrite=cfg.actor.record_overwrite,
        )
        sink = _tee(sink, dataset)
    backend, horizon, prefix_cap = make_backend(cfg, spec, online)
    latency = build_latency_model(cfg.actor.latency) if cfg.actor.virtual_time else None
    recording = None  # the rerun recording actor.rerun_path asks for, when no observer is given
    if observer is None and cfg.actor.rerun_path:
        from robotrl.viz.rerun import RerunObserver

        observer = recording = RerunObserver(
            cfg.actor.rerun_path, application_id=f"robotrl-{cfg.actor.actor_id}"
        )
    loop = build_loop(
        env,
        backend,
        cfg.actor,
        horizon,
        latency,
        sink=sink,
        batch_transitions=cfg.transport.batch_transitions,
        max_prefix=prefix_cap,
        observer=observer,
    )
    pace = None
    if online and cfg.actor.virtual_time and cfg.actor.versions_per_episode > 0:
        assert isinstance(backend, InProcessInference)  # virtual time: the serial runner
        pace = LearnerPace(backend, cfg.actor.versions_per_episode, cfg.actor.weights_wait_s)
    results: list[EpisodeResult] = []
    stop = threading.Event()  # Ctrl-C: end the episode at the next tick (the arm holds), then stop

    def on_interrupt(*_: object) -> None:
        stop.set()
        loop.request_stop()

    previous = signal.signal(signal.SIGINT, on_interrupt)
    start = time.perf_counter()
    columns = (TextColumn(title), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[status]}"))
    try:
        with Progress(*columns, TimeElapsedColumn(), console=Console(stderr=True)) as progress:
            total = cfg.actor.episodes or None
            task = progress.add_task(title, total=total, status="")
            for i in itertools.count() if total is None else range(total):
                if stop.is_set():
                    break
                if pace is not None and not pace.gave_up and pace.wanted(i) > backend.newest_version():
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
    finally:
        signal.signal(signal.SIGINT, previous)
        backend.close()
        env.close()
        recorded = None if dataset is None else dataset.close()
        if recording is not None:
            recording.close()
            print(
                f"rerun recording written to {recording.path} (open it with: rerun {recording.path})",
                file=sys.stderr,
            )
    summary = summarize(results, spec.control_hz, wall_clock=not cfg.actor.virtual_time)
    summary.update(
        env=spec.name if cfg.hardware.robot_type is not None else cfg.env.id,
        strategy=cfg.actor.strategy.value,
        latency=cfg.actor.latency.kind.value if cfg.actor.virtual_time else "wall-clock",
        wall_s=round(time.perf_counter() - start, 2),
    )
    diagnosis = chunk_too_short(summary["p90_delay_ticks"], horizon, cfg.actor.margin_ticks)
    if diagnosis is not None and summary["starved_ticks"]:
        summary["diagnosis"] = diagnosis
        log.warning("%s", diagnosis)
    report = getattr(env, "report", None)  # a real arm: every safety clamp, hold and stop, counted
    if callable(report):
        summary["arm"] = report()
    if recorded is not None:
        summary["dataset"] = recorded
        print(
            f"episodes recorded as a LeRobotDataset in {recorded['path']} ({recorded['episodes']} "
            f"episodes, {recorded['frames']} frames, {recorded['dropped_frames']} dropped)",
            file=sys.stderr,
        )
    return summary


def _tee(first: TransitionSink | None, second: TransitionSink) -> TransitionSink:
    """A sink handing every batch to ``first`` (when there is one), then to ``second``."""
    if first is None:
        return second

    def both(transitions: list[Transition]) -> None:
        first(transitions)
        second(transitions)

    return both


def print_summary(summary: dict[str, Any]) -> None:
    table = Table(title=f"{summary['env']}  strategy={summary['strategy']}  latency={summary['latency']}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    lo, hi = summary["ci95"]
    rows = [
        ("episodes", summary["episodes"]),
        ("success rate", f"{summary['success_rate']:.1%}  (95% CI {lo:.1%}-{hi:.1%})"),
        (
            "mean time to success",
            "-"
            if summary["mean_time_to_success_s"] is None
            else f"{summary['mean_time_to_success_s']:.2f} s",
        ),
        ("starved ticks", summary["starved_ticks"]),
        ("action jerk (RMS)", f"{summary['jerk_rms']:.1f}"),
        (
            "mean delay",
            "-" if summary["mean_delay_ticks"] is None else f"{summary['mean_delay_ticks']:.2f} ticks",
        ),
        ("missed deadlines", summary["missed_deadlines"]),
        ("chunks refused", sum(summary["chunks_refused"].values())),
    ]
    if "jitter_p99_ms" in summary:
        rows.append(
            ("tick jitter p50 / p99", f"{summary['jitter_p50_ms']:.2f} / {summary['jitter_p99_ms']:.2f} ms")
        )
    if summary.get("outcomes"):
        rows.append(("how episodes ended", outcome_text(summary["outcomes"])))
    if summary.get("arm"):
        rows.append(("arm: clamps, holds, stops", ", ".join(f"{k} {v}" for k, v in summary["arm"].items())))
    for name, value in rows:
        table.add_row(name, str(value))
    Console().print(table)


def _keep(into: list[EpisodeResult], results: Sequence[EpisodeResult]) -> None:
    into[:] = results


def eval_role(cfg: RobotRLConfig) -> int:
    """`robotrl eval`: episodes without a learner; prints and writes the summary."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    finished: list[EpisodeResult] = []
    summary = run_episodes(cfg, sink=None, title="eval", on_episode=lambda results: _keep(finished, results))
    print_summary(summary)
    out = Path(cfg.run_dir) / EVAL_SUMMARY
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2))
    rows = "".join(json.dumps(row) + "\n" for row in episode_rows(finished))
    (out.parent / EVAL_EPISODES).write_text(rows)
    print(f"summary written to {out}, one line per episode to {out.parent / EVAL_EPISODES}", file=sys.stderr)
    return 1 if summary["failures"] else 0


class SentAudit:
    """Rewrites ``path`` with the rows this actor incarnation's transport has numbered and
    kept, after each batch (``actor.audit_sent``): what the soak bench audits after killing
    the actor. The batch ``seq`` names may already be on disk when a kill stops the rewrite."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows = 0
        path.parent.mkdir(parents=True, exist_ok=True)

    def __call__(self, stream: str, seq: int, rows: int) -> None:
        self.rows += rows
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"stream": stream, "rows": self.rows, "seq": seq}))
        tmp.replace(self.path)


def actor_role(cfg: RobotRLConfig) -> int:
    """`robotrl actor`: episodes whose transitions stream to the learner and whose weights
    come from it, hot-swapped between inferences."""
    from robotrl.core.batch import TransitionBatch
    from robotrl.transport.transitions import TransitionSender

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    audit_path = Path(cfg.run_dir) / f"actor_{cfg.actor.actor_id}_sent.json"
    audit = SentAudit(audit_path) if cfg.actor.audit_sent else None
    sender = TransitionSender.from_config(cfg.transport, cfg.actor.actor_id, on_numbered=audit)
    refused = 0
    rows_sent = 0

    def to_learner(transitions: list[Transition]) -> None:
        nonlocal refused, rows_sent
        if not sender.send(TransitionBatch.from_transitions(transitions)):
            refused += len(transitions)  # queue and spool full: counted, reported below
            return
        rows_sent += len(transitions)

    progress_path = Path(cfg.run_dir) / f"actor_{cfg.actor.actor_id}_progress.json"

    def report(results: Sequence[EpisodeResult]) -> None:
        """What `robotrl launch` shows: episodes, successes, the newest policy version executed."""
        versions = [v for r in results for v in r.policy_versions]
        progress = {
            "episodes": len(results),
            "successes": sum(r.success for r in results),
            "ticks": sum(r.ticks for r in results),
            "policy_version": max(versions, default=-1),
            "last_success": bool(results[-1].success),
            "backlog": sender.backlog(),
            "rows_sent": rows_sent,  # handed to the transport
            "refused_rows": refused,
            "missed_deadlines": sum(r.missed_deadlines for r in results),
            "time": round(time.time(), 3),
            "taken_over": sum(r.intervention_ticks > 0 for r in results),  # episodes a person (or
            # the sim's scripted takeover) drove for a while
            # per episode: success with no intervention, newest policy version executed (learning curves)
            "history": [
                [int(r.success and not r.intervention_ticks), max(r.policy_versions, default=-1)]
                for r in results
            ],
        }
        tmp = progress_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(progress))
        tmp.replace(progress_path)

    progress_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        summary = run_episodes(cfg, sink=to_learner, title=cfg.actor.actor_id, online=True, on_episode=report)
        delivered = sender.flush(timeout_s=cfg.transport.peer_timeout_s * 2)
    finally:
        sender.close()
    summary["transport"] = {**sender.stats(), "refused_transitions": refused, "flushed": delivered}
    print_summary(summary)
    out = Path(cfg.run_dir) / f"actor_{cfg.actor.actor_id}_summary.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2))
    print(f"summary written to {out}", file=sys.stderr)
    if not delivered:
        print(
            "robotrl actor: some transitions were not acknowledged by the learner (kept in the spool)",
            file=sys.stderr,
        )
    return 1 if summary["failures"] else 0
