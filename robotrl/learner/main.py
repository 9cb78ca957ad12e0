"""`robotrl learner`: compose buffers, algorithm, links, metrics and checkpoints, then run.

:func:`build_learner` is the composition (tests call it with a small policy and
in-process links); :func:`run_learner` adds what only the real role needs: the
environment's spec, the configured policy and the ZeroMQ links.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from robotrl.config.load import ConfigError
from robotrl.config.schema import RobotRLConfig
from robotrl.core import run_folder
from robotrl.core.fsync import Fsync
from robotrl.core.protocols import BatchReceiver, Sender
from robotrl.core.types import EnvSpec, WeightUpdate
from robotrl.learner.admission import Admission, ValueBounds
from robotrl.learner.algorithms import build_algorithm
from robotrl.learner.anchor import AnchorBuffer
from robotrl.learner.checkpoint import BUFFERS, Checkpointer, Counters
from robotrl.learner.demos import load_demonstrations
from robotrl.learner.distributed import SINGLE, Ranks, follow, init_ranks, leave, share_state
from robotrl.learner.guard import LearnerDivergedError
from robotrl.learner.journal import Journal, restored_ledger
from robotrl.learner.loop import Learner
from robotrl.learner.metrics import MetricsLog
from robotrl.learner.replay import ChunkReplay, ReplaySpec
from robotrl.learner.snapshots import PolicySnapshots
from robotrl.learner.torch_utils import resolve_device
from robotrl.policy.factory import trained_max_delay

EXIT_DIVERGED = 4
"""`robotrl learner`'s exit status when its updates kept ending non-finite (a config error: 2)."""
EXIT_RANK_LOST = 6
"""Rank 0's exit status when a collective failed: another rank died or hung up."""


def replay_spec(cfg: RobotRLConfig, spec: EnvSpec, horizon: int, max_delay: int | None = None) -> ReplaySpec:
    """Rows as ``spec`` makes them; demonstration windows draw committed prefixes up to
    ``max_delay`` (the policy's trained maximum; None: ``policy.max_delay``)."""
    delay = cfg.policy.max_delay if max_delay is None else max_delay
    return ReplaySpec(
        state_dim=spec.state_dim,
        action_dim=spec.action_dim,
        horizon=horizon,
        cameras=dict(spec.camera_shapes),
        gamma=cfg.learner.gamma,
        max_delay=min(delay, horizon - 1),
        intervention_penalty=cfg.learner.rapi.intervention_penalty,
    )


def open_journal(cfg: RobotRLConfig) -> Journal | None:
    """The write-ahead journal of ``run_dir``; only when checkpoints hold the buffers (without
    them a restarted learner starts from empty buffers anyway)."""
    if not cfg.learner.save_buffers:
        return None
    return Journal(
        Path(cfg.run_dir) / run_folder.JOURNAL, cfg.learner.journal_max_mb << 20, Fsync(cfg.learner.fsync)
    )


def resume_point(cfg: RobotRLConfig) -> Path | None:
    """The checkpoint a (re)started learner resumes from (the newest whose state is finite), or None."""
    return Checkpointer(cfg.run_dir).newest_finite() if cfg.learner.resume else None


def build_learner(
    cfg: RobotRLConfig,
    policy: Any,
    spec: EnvSpec,
    transitions: BatchReceiver,
    weights: Sender[WeightUpdate],
    console: bool = True,
    ranks: Ranks = SINGLE,
) -> Learner:
    """Everything but the links and the policy, which the caller provides; rank 0 of ``ranks``,
    which gives the other ranks its state (:func:`share_state`) before it returns (built on
    another rank, as the learner bench's replicas are, it takes rank 0's state instead)."""
    lrn = cfg.learner
    device = resolve_device(lrn.device)
    rspec = replay_spec(cfg, spec, int(policy.horizon), trained_max_delay(policy))
    storage = Path(lrn.storage_dir) if lrn.storage_dir else None
    online = ChunkReplay(rspec, lrn.online_capacity, storage, "online")
    anchor = AnchorBuffer(rspec, lrn.anchor_capacity, lrn.fastest_successes, spec.max_episode_ticks, storage)
    if lrn.demos_path:
        episodes = load_demonstrations(lrn.demos_path, rspec, lrn.success_reward)
        anchor.load_demos(episodes, sum(len(e) for e in episodes))
    algorithm = build_algorithm(lrn, policy, device, spec.state_dim, dict(spec.camera_shapes), ranks)
    checkpointer = Checkpointer(cfg.run_dir, Fsync(lrn.fsync))
    checkpointer.remove_leftovers()
    counters = Counters()
    resumed: dict[str, Any] | None = None
    latest = resume_point(cfg)
    if latest is not None:
        resumed, counters = checkpointer.load(latest, device)
        algorithm.load_state_dict(resumed)
        logging.getLogger(__name__).info("resumed from %s: %s", latest, counters)
    # Versions published in this run folder after the checkpoint (or, without one, at all) may
    # be running on the actors: count above them, or their rows look like the future.
    counters.policy_version = max(counters.policy_version, checkpointer.published_version())
    share_state(ranks, algorithm, device, resumed)
    run_dir = Path(cfg.run_dir)
    rerun_path = run_dir / run_folder.LEARNER_RECORDING if lrn.rerun else None
    metrics = MetricsLog(run_dir / run_folder.LEARNER_METRICS, console=console, rerun_path=rerun_path)
    learner = Learner(
        algorithm,
        online,
        anchor,
        lrn,
        transitions,
        weights,
        metrics=metrics,
        checkpointer=checkpointer,
        journal=open_journal(cfg),
        counters=counters,
        admission=Admission(ValueBounds.of(spec, lrn.guard)),
        snapshots=PolicySnapshots(run_dir, lrn.snapshot_every_groups) if lrn.snapshot_every_groups else None,
        weights_subset=cfg.transport.weights_subset,
        prefetch=lrn.prefetch_batches if lrn.prefetch_batches is not None else 2 * (device.type == "cuda"),
        seed=cfg.seed,
        ranks=ranks,
    )
    if latest is not None and lrn.save_buffers and (latest / BUFFERS).is_dir():
        learner.load_buffers(latest / BUFFERS)
    learner.replay_journal(latest)
    return learner


def check_offline_demos(learner: Learner, learning_starts: int) -> None:
    """An offline learner waits for ``learning_starts`` samples that only its demonstrations can
    provide: fewer would leave it waiting for ever, so it refuses to start."""
    if len(learner.anchor) < max(learning_starts, 1):
        raise ConfigError(
            f"learner.offline: the demonstrations give {len(learner.anchor)} chunk samples, "
            f"fewer than learner.learning_starts={learning_starts}: lower it or record more"
        )


def _env_spec(cfg: RobotRLConfig) -> EnvSpec:
    if cfg.hardware.robot_type is not None:  # a real arm on the actor's host: its spec from config
        from robotrl.hardware.factory import hardware_spec

        arm: EnvSpec = hardware_spec(cfg)
        return arm
    from robotrl.sim import make_env

    env = make_env(cfg.env)
    try:
        spec: EnvSpec = env.spec
    finally:
        env.close()
    return spec


def _open_links(cfg: RobotRLConfig) -> tuple[BatchReceiver, Sender[WeightUpdate]]:
    """The ZeroMQ links of the transport package: the one place that names their constructors.
    An offline learner (``learner.offline``) gets links no actor reaches: an empty in-process
    transition queue and a weight link that drops every version.

    The transition receiver starts from the ledger of what this learner already holds
    (its checkpoint and journal), so batches an actor resends after a restart are
    acknowledged without being stored twice."""
    if cfg.learner.offline:
        from robotrl.transport.inproc import DroppedWeights, TransitionQueue

        return TransitionQueue(), DroppedWeights()
    from robotrl.transport.transition_receiver import TransitionReceiver
    from robotrl.transport.weights import WeightPublisher

    ledger = restored_ledger(resume_point(cfg), open_journal(cfg))
    return TransitionReceiver.from_config(cfg.transport, ledger=ledger), WeightPublisher.from_config(
        cfg.transport
    )


def run_follower(cfg: RobotRLConfig, ranks: Ranks) -> int:
    """A learner rank other than 0 (under torchrun): the same policy and algorithm, in the state
    rank 0 sends, training on the shards rank 0 scatters until it says stop. No links, buffers,
    journal, run folder or checkpoints: rank 0 owns them."""
    import torch

    # torchrun signals every rank on Ctrl-C; rank 0 checkpoints, then tells this one to stop.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    from robotrl.policy import build_policy

    spec = _env_spec(cfg)
    policy = build_policy(cfg.policy, spec)
    device = resolve_device(cfg.learner.device)
    algorithm = build_algorithm(cfg.learner, policy, device, spec.state_dim, dict(spec.camera_shapes), ranks)
    share_state(ranks, algorithm, device)  # rank 0's checkpoint or seed, with no run folder here
    torch.manual_seed(cfg.seed + ranks.rank)  # each rank its own noise and image shifts
    try:
        groups = follow(algorithm, ranks, cfg.learner.guard.max_nonfinite_groups)
    except LearnerDivergedError as exc:  # rank 0 stops at the same group and says why
        logging.getLogger(__name__).error("robotrl learner rank %d stopped: %s", ranks.rank, exc)
        return EXIT_DIVERGED
    logging.getLogger(__name__).info("robotrl learner rank %d: stopped after %d groups", ranks.rank, groups)
    return 0


def _banner(cfg: RobotRLConfig, ranks: Ranks) -> str:
    """The learner's first line: its rule, device, ranks, links and metrics file."""
    t = cfg.transport
    links = (
        f"offline: {cfg.learner.max_groups} groups on {cfg.learner.demos_path} alone"
        if cfg.learner.offline
        else f"receiving on {t.transitions_endpoint}, publishing on {t.weights_endpoint}"
    )
    parallel = ""
    if ranks.parallel:
        sharded = ", the policy sharded" if ranks.sharded else ""
        parallel = f" x {ranks.world} ranks (batch {cfg.learner.batch_size} each{sharded})"
    return (
        f"[bold]robotrl learner[/bold]: {cfg.learner.algorithm.value} "
        f"on {resolve_device(cfg.learner.device)}{parallel}, {links}, "
        f"metrics in {Path(cfg.run_dir) / run_folder.LEARNER_METRICS}"
    )


def run_learner(cfg: RobotRLConfig) -> int:
    """The `robotrl learner` role; under ``torchrun --nproc-per-node N`` one of N data-parallel
    ranks (:mod:`robotrl.learner.distributed`), rank 0 the one with links."""
    import torch

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    torch.manual_seed(cfg.seed)
    ranks = init_ranks(resolve_device(cfg.learner.device), cfg.learner.shard_policy)
    if not ranks.is_main:
        if cfg.learner.torch_threads:
            torch.set_num_threads(cfg.learner.torch_threads)
        code = run_follower(cfg, ranks)
        leave(ranks)
        return code
    # A stop asked for while the learner is built (loading a checkpoint, replaying its journal)
    # takes effect once it is built: it then checkpoints what it restored instead of dying.
    stop_asked = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop_asked.set())
    if cfg.learner.torch_threads:
        torch.set_num_threads(cfg.learner.torch_threads)
    from robotrl.policy import build_policy

    spec = _env_spec(cfg)
    policy = build_policy(cfg.policy, spec)  # from policy.path when set: fine-tuning starts there
    transitions, weights = _open_links(cfg)
    learner = build_learner(cfg, policy, spec, transitions, weights, ranks=ranks)
    if cfg.learner.offline:
        check_offline_demos(learner, cfg.learner.learning_starts)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: learner.stop())
    if stop_asked.is_set():
        logging.getLogger(__name__).info("stop asked for while the learner was built: stopping")
        learner.stop()
    Console().print(_banner(cfg, ranks))
    try:
        counters = learner.run(cfg.learner.max_groups)
    except LearnerDivergedError as exc:
        logging.getLogger(__name__).error("robotrl learner stopped: %s", exc)
        Console(stderr=True).print(f"[bold red]robotrl learner stopped[/bold red]: {exc}")
        leave(ranks)
        return EXIT_DIVERGED
    except RuntimeError as exc:
        if not ranks.parallel:
            raise
        # A collective fails on rank 0 when another rank is gone. What was acknowledged is in
        # the journal, which the next start (launch restarts the learner) replays.
        Console(stderr=True).print(
            f"[bold red]robotrl learner stopped[/bold red]: a collective with the other "
            f"{ranks.world - 1} rank(s) failed, so one of them died or hung up (torchrun's report "
            "below names it); acknowledged batches are in the journal for the next start "
            f"({escape(str(exc))})",
            soft_wrap=True,
        )
        return EXIT_RANK_LOST
    finally:
        transitions.close()
        weights.close()
        learner.online.close()
        learner.anchor.close()
        if learner.metrics is not None:
            learner.metrics.close()
    Console().print(
        f"robotrl learner: stopped after {counters.groups} groups, policy version {counters.policy_version}"
    )
    leave(ranks)
    return 0
