"""`robotrl bench learner --ranks N`: RAPI update groups as one learner rank, as N
data-parallel ranks (robotrl/learner/distributed.py), as N ranks sharding the policy
(``learner.shard_policy``, FSDP2) and as N ranks sampling for themselves, and where a rank's
time goes.

The setup of `robotrl bench learner` (the small flow policy on two 96x96 cameras, the critic
reading them, batch 256 per rank, the real buffers filled with synthetic episodes), run four
times: as one process, and three times as N processes joined by torch.distributed (gloo on the
CPU, NCCL with one GPU per rank): replicating the policy (DDP) with rank 0 sampling for all
(the learner's way), sharding it, and replicating it with each rank sampling its own replica
of the buffers (the alternative the learner did not take: docs/results.md). Each rank keeps
its batch (weak scaling: N ranks train on N times the rows per update). On a CPU the cores
are split between the ranks (one rank has them all, each of N ranks a share), so the
comparison is the same machine used two ways; on GPUs each rank has its own device. Each
group is guarded as the learner's loop guards it.

Rank 0 times, per update: waiting for its sampled batch (``sample``: sampling, or waiting
on the prefetch thread), encoding and scattering the other ranks' shards (``scatter``), and
the rest (``compute``: forward, backward with DDP's gradient all-reduce, optimiser step;
sharded, FSDP's gathers and reduce-scatters in place of the all-reduce).
``allreduce_ms`` is one all-reduce of a tensor the size of every trainable parameter (policy
and critic), timed apart: what a step's gradient traffic costs at least.

JSON: ``updates_per_s_<n>_ranks`` and ``samples_per_s_<n>_ranks`` (rows trained on per
second over all ranks), ``speedup`` (samples/s of N ranks over one) and
``scaling_efficiency`` (speedup / N); for the sharded ranks ``updates_per_s_<n>_ranks_sharded``,
``sharded_over_replicated`` (their updates/s over the replicated ranks') and
``policy_held_share_sharded`` (the share of the policy's parameters rank 0 holds between
updates: 1/N when sharded, against 1 replicated); for ranks that each sample their own replica
of the buffers (filled alike, not kept in step by ingest: what sampling there costs, no more)
``updates_per_s_<n>_ranks_local_sampling`` and ``local_sampling_over_scatter``.
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from robotrl.bench.learner import Stream, _default_policy, bench_config, bench_spec
from robotrl.bench.report import report
from robotrl.config.schema import RobotRLConfig
from robotrl.core.protocols import Algorithm
from robotrl.core.types import EnvSpec
from robotrl.learner.algorithms import build_algorithm
from robotrl.learner.distributed import SINGLE, BatchScatter, Ranks, backend, follow, leave, share_state
from robotrl.learner.loop import Learner
from robotrl.learner.main import build_learner
from robotrl.learner.prefetch import Prefetcher
from robotrl.learner.samples import Batch
from robotrl.learner.torch_utils import resolve_device
from robotrl.transport.inproc import DroppedWeights, TransitionQueue

FILL_BATCHES = 32
"""Synthetic batches (64 transitions each) in the online buffer before timing."""
MIN_GROUPS = 3
ALLREDUCE_REPEATS = 10
DEADLINE_S = 900.0
SCATTER, LOCAL, SHARDED = "scatter", "local", "sharded"
"""How N ranks train: rank 0 samples for all and scatters (the learner's way), each rank samples
its own replica of the buffers, or rank 0 scatters to ranks that shard the policy."""


@dataclass
class RankTimes:
    """What rank 0 measured over the timed groups."""

    groups: int
    updates: int
    wall_s: float
    sample_s: float
    scatter_s: float
    allreduce_ms: float
    threads: int
    batch: int
    device: str
    trainable: int
    held_share: float
    """The share of the policy's parameter elements this rank holds between updates."""


def _trainable(policy: torch.nn.Module, algorithm: Algorithm) -> int:
    """Parameters whose gradients the ranks all-reduce: the policy's and the critic's."""
    nets = [policy, getattr(algorithm, "critic", None)]
    return sum(p.numel() for net in nets if net is not None for p in net.parameters() if p.requires_grad)


def _allreduce_ms(ranks: Ranks, elements: int, device: torch.device) -> float:
    """Milliseconds of one all-reduce of ``elements`` float32 values (0 for one rank)."""
    if not ranks.parallel:
        return 0.0
    grads = torch.zeros(elements, device=device)
    for _ in range(2):
        dist.all_reduce(grads)
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(ALLREDUCE_REPEATS):
        dist.all_reduce(grads)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / ALLREDUCE_REPEATS * 1e3


def _timed(draw: Callable[[], Batch], spent: list[float]) -> Callable[[], Batch]:
    """``draw``, adding each call's seconds to ``spent[0]``."""

    def call() -> Batch:
        start = time.perf_counter()
        batch = draw()
        spent[0] += time.perf_counter() - start
        return batch

    return call


def _held_share(policy: torch.nn.Module) -> float:
    """The share of ``policy``'s parameter elements this rank holds (its slices, when sharded)."""
    params = list(policy.parameters())
    held = sum(p.to_local().numel() if isinstance(p, DTensor) else p.numel() for p in params)
    return held / max(1, sum(p.numel() for p in params))


def _filled_learner(cfg: RobotRLConfig, policy: torch.nn.Module, spec: EnvSpec, ranks: Ranks) -> Learner:
    """A learner with the bench's buffers, filled with the same synthetic episodes on every rank."""
    link, weights = TransitionQueue(), DroppedWeights()
    learner = build_learner(cfg, policy, spec, link, weights, console=False, ranks=ranks)
    stream = Stream(np.random.default_rng(0))
    for _ in range(FILL_BATCHES):
        learner.ingest(stream.next())
    return learner


def _follower(cfg: RobotRLConfig, policy: torch.nn.Module, spec: EnvSpec, ranks: Ranks, local: bool) -> None:
    """A rank other than 0: trains on rank 0's shards or, ``local``, on its own replica's rows."""
    device = resolve_device(cfg.learner.device)
    max_nonfinite = cfg.learner.guard.max_nonfinite_groups
    if local:
        with tempfile.TemporaryDirectory(prefix="robotrl-bench-ranks-") as tmp:
            cfg.run_dir = tmp
            replica = _filled_learner(cfg, policy, spec, ranks)
            algorithm = replica.algorithm
            draw = functools.partial(replica.next_batch, cfg.learner.batch_size)
            prefetcher = Prefetcher(draw, replica.prefetch) if replica.prefetch else None  # as rank 0
            try:
                follow(algorithm, ranks, max_nonfinite, prefetcher.get if prefetcher else draw)
            finally:
                if prefetcher is not None:
                    prefetcher.close()
                replica.online.close()
                replica.anchor.close()
    else:
        cameras = dict(spec.camera_shapes)
        algorithm = build_algorithm(cfg.learner, policy, device, spec.state_dim, cameras, ranks)
        share_state(ranks, algorithm, device)
        follow(algorithm, ranks, max_nonfinite)
    _allreduce_ms(ranks, _trainable(policy, algorithm), device)
    leave(ranks)


def _rank(
    rank: int,
    world: int,
    store: str,
    threads: int,
    seconds: float,
    quick: bool,
    variant: str,
    out: str,
) -> None:
    """One rank: rank 0 the learner with buffers, timing update groups; the others followers,
    trained on what rank 0 scatters or, ``local``, on what they sample from their own replica."""
    torch.set_num_threads(threads)
    cfg = bench_config(quick)
    local = variant == LOCAL
    if local:
        cfg.seed += rank  # each replica draws its own rows
    device = resolve_device(cfg.learner.device)
    ranks = SINGLE
    if world > 1:
        if device.type == "cuda":
            torch.cuda.set_device(rank)
        dist.init_process_group(backend(device), init_method=f"file://{store}", rank=rank, world_size=world)
        ranks = Ranks(rank, world, variant == SHARDED)
    spec = bench_spec()
    torch.manual_seed(0)  # every rank builds the same networks
    policy = _default_policy(cfg, spec)
    rows = cfg.learner.batch_size if local else None
    if not ranks.is_main:
        _follower(cfg, policy, spec, ranks, local)
        return
    per_group = cfg.learner.rapi.critic_updates_per_group + cfg.learner.actor_updates_per_group
    with tempfile.TemporaryDirectory(prefix="robotrl-bench-ranks-") as tmp:
        cfg.run_dir = tmp
        learner = _filled_learner(cfg, policy, spec, ranks)
        prefetcher: Prefetcher | None = None
        try:
            draw_rows = functools.partial(learner.next_batch, rows)
            prefetcher = Prefetcher(draw_rows, learner.prefetch) if learner.prefetch else None
            sample_s, scatter_s = [0.0], [0.0]
            drawn = _timed(prefetcher.get if prefetcher else draw_rows, sample_s)
            scattered = drawn if local else _timed(BatchScatter(ranks, drawn), scatter_s)

            def group() -> None:  # as the learner's loop runs one, guarded (the followers guard too)
                learner.commands.run_group(None)
                learner.guard.check(0, learner.algorithm.update_group(scattered))

            group()  # untimed: optimiser state, caches, DDP's first buckets
            sample_s[0] = scatter_s[0] = 0.0
            groups, start = 0, time.perf_counter()
            while groups < MIN_GROUPS or time.perf_counter() - start < seconds:
                group()
                groups += 1
            if device.type == "cuda":
                torch.cuda.synchronize()
            wall = time.perf_counter() - start
            learner.commands.stop()
        finally:
            if prefetcher is not None:
                prefetcher.close()
            learner.online.close()
            learner.anchor.close()
    times = RankTimes(
        groups,
        groups * per_group,
        wall,
        sample_s[0],
        0.0 if local else scatter_s[0] - sample_s[0],
        _allreduce_ms(ranks, _trainable(policy, learner.algorithm), device),
        threads,
        cfg.learner.batch_size,
        device.type,
        _trainable(policy, learner.algorithm),
        _held_share(policy),
    )
    Path(out).write_text(json.dumps(asdict(times)))
    leave(ranks)


def _rank_process(*args: Any) -> None:
    """:func:`_rank`, then an exit without the interpreter's teardown. A follower's DDP or FSDP
    state still holds collective work objects after the process group is gone, and freeing
    them while the interpreter finalises aborted a rank ("terminate called without an active
    exception") in one CI run; the rank's results are written before this point."""
    _rank(*args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _measure(world: int, seconds: float, quick: bool, variant: str = SCATTER) -> RankTimes:
    """Run ``world`` ranks in spawned processes; rank 0's times."""
    cores = os.cpu_count() or 1
    threads = max(1, cores // world)
    with tempfile.TemporaryDirectory(prefix="robotrl-bench-ranks-") as tmp:
        out = Path(tmp) / "rank0.json"
        ctx = multiprocessing.get_context("spawn")
        procs = [
            ctx.Process(
                target=_rank_process,
                args=(r, world, f"{tmp}/store", threads, seconds, quick, variant, str(out)),
                name=f"bench-rank-{r}",
            )
            for r in range(world)
        ]
        for p in procs:
            p.start()
        deadline = time.monotonic() + DEADLINE_S
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in procs:
            if p.is_alive():
                p.kill()
        codes = [p.exitcode for p in procs]
        if codes != [0] * world or not out.exists():
            raise SystemExit(f"robotrl bench learner --ranks: {world} rank(s) ended with exit codes {codes}")
        return RankTimes(**json.loads(out.read_text()))


def run(quick: bool = False, ranks: int = 2) -> dict[str, float | str]:
    if ranks < 2:
        raise SystemExit(f"robotrl bench learner --ranks: compares 1 rank with N >= 2, got {ranks}")
    if torch.cuda.is_available() and torch.cuda.device_count() < ranks:
        raise SystemExit(f"robotrl bench learner --ranks {ranks}: {torch.cuda.device_count()} GPU(s) here")
    seconds = 2.0 if quick else 15.0
    one, many = _measure(1, seconds, quick), _measure(ranks, seconds, quick)
    sharded = _measure(ranks, seconds, quick, SHARDED)
    local = _measure(ranks, seconds, quick, LOCAL)

    def per_s(t: RankTimes, world: int) -> tuple[float, float]:
        updates = t.updates / t.wall_s
        return updates, updates * t.batch * world

    (u1, s1), (un, sn), (us, ss) = per_s(one, 1), per_s(many, ranks), per_s(sharded, ranks)
    ul, sl = per_s(local, ranks)
    speedup = sn / s1 if s1 > 0 else 0.0
    result: dict[str, float | str] = {
        "bench": "learner_ranks",
        "headline_ratio": round(speedup / ranks, 3),
        "headline": "scaling_efficiency",
        "ranks": float(ranks),
        "device": many.device,
        "updates_per_s_1_rank": round(u1, 2),
        f"updates_per_s_{ranks}_ranks": round(un, 2),
        "samples_per_s_1_rank": round(s1, 1),
        f"samples_per_s_{ranks}_ranks": round(sn, 1),
        "speedup": round(speedup, 3),
        "scaling_efficiency": round(speedup / ranks, 3),
        f"updates_per_s_{ranks}_ranks_sharded": round(us, 2),
        f"samples_per_s_{ranks}_ranks_sharded": round(ss, 1),
        "sharded_over_replicated": round(us / un, 3) if un > 0 else 0.0,
        "policy_held_share_sharded": round(sharded.held_share, 3),
        f"updates_per_s_{ranks}_ranks_local_sampling": round(ul, 2),
        f"samples_per_s_{ranks}_ranks_local_sampling": round(sl, 1),
        "local_sampling_over_scatter": round(ul / un, 3) if un > 0 else 0.0,
        "batch_per_rank": float(many.batch),
        "threads_1_rank": float(one.threads),
        "threads_per_rank": float(many.threads),
        "trainable_params": float(many.trainable),
        "groups_timed": float(min(one.groups, many.groups)),
    }
    rows = []
    variants = (
        ("1", 1, one, ""),
        (str(ranks), ranks, many, ""),
        (f"{ranks} sharded", ranks, sharded, "_sharded"),
        (f"{ranks} local sampling", ranks, local, "_local_sampling"),
    )
    for label, world, t, variant in variants:
        ms = 1e3 / t.updates
        compute = t.wall_s - t.sample_s - t.scatter_s
        split = {
            "sample_ms": t.sample_s * ms,
            "scatter_ms": t.scatter_s * ms,
            "compute_ms": compute * ms,
            "allreduce_ms": t.allreduce_ms,
        }
        suffix = f"{world}_rank{'s' if world > 1 else ''}{variant}"
        result.update({f"{k}_{suffix}": round(v, 2) for k, v in split.items()})
        rows.append([label, t.threads, t.updates / t.wall_s, *split.values()])
    report(
        f"learner as 1 and {ranks} ranks: RAPI at batch {many.batch} per rank, "
        f"{many.trainable / 1e6:.1f}M trainable parameters on {many.device} "
        f"({'quick' if quick else 'full'} run)",
        ["ranks", "threads/rank", "updates/s", "sample ms", "scatter ms", "compute ms", "all-reduce ms"],
        rows,
        result,
    )
    return result
