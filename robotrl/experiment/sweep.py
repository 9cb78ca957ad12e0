"""`robotrl experiment experiment=latency_sweep`: one checkpoint under every latency model and
execution strategy, in virtual time on fixed seeds, as a table, a JSON file and a plot.

Each cell is a `robotrl eval` process in virtual time (latency drawn from the model, no
sleeping), so the sweep is exact, reproducible and much faster than real time, and
independent cells run side by side (:mod:`robotrl.experiment.parallel`); the same seeds
are used in every cell, so cells differ only by latency and strategy. Without
``experiment.checkpoint`` the demo's record and pretrain steps make the policy first
(cached in ``experiment.output_dir``).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from rich import box
from rich.console import Console
from rich.table import Table

from robotrl.actor.report import pool_summaries
from robotrl.config.actor import Strategy
from robotrl.config.latency import parse_latency
from robotrl.config.schema import RobotRLConfig
from robotrl.core import run_folder
from robotrl.core.run_folder import EvalSummary
from robotrl.experiment.parallel import Job, JobDone, run_parallel
from robotrl.experiment.steps import config_overrides, ran_every_episode, robotrl, run_id

SWEEP_DIR = "latency_sweep"


def cell_config(cfg: RobotRLConfig, latency: str, strategy: str, policy: str) -> RobotRLConfig:
    out = copy.deepcopy(cfg)
    kind, median = parse_latency(latency)
    out.actor.latency.kind, out.actor.latency.median_s = kind, median
    out.actor.strategy = Strategy(strategy)
    out.actor.virtual_time = True
    out.actor.episodes = cfg.experiment.sweep_episodes
    out.actor.seed = cfg.experiment.eval_seed
    out.policy.path = policy
    return out


def sweep_policies(cfg: RobotRLConfig, console: Console) -> list[str]:
    """The checkpoints to sweep: ``experiment.checkpoint`` (or ``policy.path``) when set; otherwise
    the demo's first steps, cached in ``experiment.output_dir``: record ``experiment.demos`` expert
    demonstrations of the task and pretrain ``experiment.seeds`` policies on them (a checkpoint given
    is swept alone, whatever ``experiment.seeds`` says)."""
    ex = cfg.experiment
    path = ex.checkpoint or cfg.policy.path
    if path:
        if ex.seeds > 1:
            console.print(
                f"experiment.checkpoint given: sweeping it alone"
                f" (experiment.seeds={ex.seeds} is for pretraining)"
            )
        if not Path(path).is_dir():
            raise FileNotFoundError(f"experiment.checkpoint: no policy checkpoint at {path}")
        return [path]
    from robotrl.experiment.demo import Demo
    from robotrl.experiment.steps import Steps

    demo = Demo(cfg, console)
    demo.steps = Steps(1 + ex.seeds, console)  # only its record and pretrain steps
    demo.record()
    return [str(demo.pretrain(seed_offset=k)) for k in range(ex.seeds)]


def run_sweep(cfg: RobotRLConfig) -> int:
    from robotrl.experiment.plots import sweep_plot

    console = Console()
    ex = cfg.experiment
    policies = sweep_policies(cfg, console)
    out = Path(ex.output_dir) / SWEEP_DIR
    out.mkdir(parents=True, exist_ok=True)
    cells = cell_jobs(cfg, policies, out)
    jobs = list(cells)
    workers = min(sweep_workers(ex.sweep_workers), len(jobs))
    pooled_over = f", {len(policies)} policies pooled" if len(policies) > 1 else ""
    console.rule(
        f"[bold]latency sweep: {len(jobs)} cells x {ex.sweep_episodes} episodes of {cfg.env.id}{pooled_over}"
    )
    console.print(
        f"policies {', '.join(policies)}; seeds {ex.eval_seed}..{ex.eval_seed + ex.sweep_episodes - 1} in"
        f" every cell; {workers} cells at a time, each cell's output in"
        f" {out}/<cells>/<cell>/{run_folder.STEP_LOG}"
    )
    seed_rows: dict[Job, dict[str, Any]] = {}
    start = time.perf_counter()

    def cell_done(done: JobDone) -> None:
        summary = run_folder.read_eval_summary(done.job.out_dir)
        cell = cells[done.job]
        seed_rows[done.job] = {
            "latency": cell.latency,
            "strategy": cell.strategy,
            "policy": cell.policy,
            **_row(summary),
        }
        write(out, policies, [seed_rows[job] for job in jobs if job in seed_rows])
        lo, hi = summary["ci95"]
        took = "cached" if done.cached else f"{done.seconds:.0f} s"
        rate = summary["success_rate"]
        console.print(
            f"[{len(seed_rows)}/{len(jobs)}] {done.job.title}: {rate:.0%} [{lo:.0%}-{hi:.0%}],"
            f" {summary['starved_ticks']} starved ticks ({took}; {time.perf_counter() - start:.0f} s so far)"
        )

    run_parallel(jobs, workers, cell_done)
    rows = write(out, policies, [seed_rows[job] for job in jobs])
    plot = sweep_plot(rows, out / run_folder.SWEEP_PLOT)
    per_cell = ex.sweep_episodes * len(policies)
    console.print(table(rows, f"{cfg.env.id}: {per_cell} fixed-seed episodes per cell{pooled_over}"))
    for finding in findings(rows):
        console.print(finding)
    console.print(
        f"table: {out / run_folder.RESULTS}\nplot: {plot}\nwall time {time.perf_counter() - start:.0f} s"
    )
    return 0


@dataclass(frozen=True)
class Cell:
    latency: str
    strategy: str
    policy: int
    """Index of the policy (pretraining seed) in the sweep's list."""


def cell_jobs(cfg: RobotRLConfig, policies: list[str], out: Path) -> dict[Job, Cell]:
    """One `robotrl eval` per (policy, latency, strategy), latency-major, each in its own folder:
    ``cells/`` for the first policy (so a one-policy sweep reuses an older sweep's cells),
    ``cells_policy<k>/`` for the k-th."""
    complete = functools.partial(ran_every_episode, episodes=cfg.experiment.sweep_episodes)
    jobs = {}
    for k, policy in enumerate(policies):
        identity = (("policy", checkpoint_identity(Path(policy))),)
        cells_dir = out / ("cells" if k == 0 else f"cells_policy{k + 1}")
        mark = f" (policy {k + 1})" if len(policies) > 1 else ""
        for latency in cfg.experiment.latencies:
            for strategy in cfg.experiment.strategies:
                out_dir = cells_dir / f"{latency.replace(':', '_')}_{strategy}"
                overrides = config_overrides(
                    cell_config(cfg, latency, strategy, policy), ["env", "policy", "actor"]
                )
                argv = robotrl("eval", *overrides, f"seed={cfg.seed}", f"run_dir={out_dir}")
                job = Job(f"{latency} {strategy}{mark}", out_dir, tuple(argv), identity, complete)
                jobs[job] = Cell(latency, strategy, k)
    return jobs


def pool(seed_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (latency, strategy) over every policy's cell, in the cells' order: success and
    its Wilson interval over every episode (:func:`~robotrl.actor.report.pool_summaries`), each
    policy's own rate in ``runs``, delay averaged and prefix overruns summed over episodes."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in seed_rows:
        groups.setdefault((r["latency"], r["strategy"]), []).append(r)
    rows = []
    for (latency, strategy), cells in groups.items():
        pooled = pool_summaries(cast(list[EvalSummary], cells))
        timed = [(r["mean_delay_ticks"], r["episodes"]) for r in cells if r["mean_delay_ticks"] is not None]
        delay = sum(d * n for d, n in timed) / sum(n for _, n in timed) if timed else None
        rows.append(
            {
                "latency": latency,
                "strategy": strategy,
                **{k: pooled[k] for k in ("success_rate", "ci95", "mean_time_to_success_s", "jerk_rms")},
                "starved_ticks": pooled["starved_ticks"],
                "mean_delay_ticks": delay,
                "episodes": pooled["episodes"],
                "prefix_overruns": sum(int(r["prefix_overruns"]) for r in cells),
                "runs": pooled["runs"],
            }
        )
    return rows


def write(out: Path, policies: list[str], seed_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Write results.json (pooled rows and each policy's) and return the pooled rows."""
    rows = pool(seed_rows)
    run_folder.write_sweep_results(out, run_folder.SweepResults(policies, rows, seed_rows))
    return rows


def sweep_workers(configured: int) -> int:
    """Cells run at once: ``experiment.sweep_workers``, or with 0 as many as the cores hold
    at one inference worker's threads each (2 on a 2-core machine)."""
    from robotrl.policy.factory import inference_threads  # torch: not needed until here

    return configured or max(1, (os.cpu_count() or 1) // inference_threads())


def checkpoint_identity(policy: Path) -> str:
    """Which version of a checkpoint folder this is, so that cells of another one rerun: the run
    of the step that made it, or for a checkpoint made elsewhere its files' sizes and times."""
    made_by = run_id(policy.parent)
    if made_by is not None:
        return made_by
    digest = hashlib.sha256()
    for f in sorted(p for p in policy.rglob("*") if p.is_file()):
        stat = f.stat()
        digest.update(f"{f.relative_to(policy)}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def _row(summary: Mapping[str, Any]) -> dict[str, Any]:
    keys = (
        "success_rate",
        "ci95",
        "mean_time_to_success_s",
        "jerk_rms",
        "starved_ticks",
        "mean_delay_ticks",
        "episodes",
        "prefix_overruns",
    )
    return {k: summary[k] for k in keys}


def table(rows: list[dict[str, Any]], title: str) -> Table:
    """One row per cell, narrow enough for an 80-column terminal."""
    out = Table(
        title=title,
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
        caption="success: rate [95% CI]; jerk: RMS; delay: ticks",
    )
    for col in ("latency", "strategy", "success", "to succ.", "jerk", "starved", "delay"):
        key = col in ("latency", "strategy")
        out.add_column(col, justify="left" if key else "right", no_wrap=True)
    for r in rows:
        lo, hi = r["ci95"]
        tts = r["mean_time_to_success_s"]
        delay = r["mean_delay_ticks"]
        out.add_row(
            r["latency"],
            r["strategy"],
            f"{r['success_rate']:.0%} [{100 * lo:.0f}-{100 * hi:.0f}]",
            "-" if tts is None else f"{tts:.2f} s",
            f"{r['jerk_rms'] / 1000:.0f}k",
            str(r["starved_ticks"]),
            "-" if delay is None else f"{delay:.1f}",
        )
    return out


def difference_interval(
    p1: float, ci1: tuple[float, float], p2: float, ci2: tuple[float, float]
) -> tuple[float, float]:
    """95% interval of ``p1 - p2`` from each rate's Wilson interval (Newcombe's hybrid score
    method): tighter than asking the two intervals not to overlap, which is a ~99.5% test."""
    (l1, u1), (l2, u2) = ci1, ci2
    d = p1 - p2
    return d - math.hypot(p1 - l1, u2 - p2), d + math.hypot(u1 - p1, p2 - l2)


SYNC_TOLERANCE = 0.03
"""prefix "keeps sync's success" where the difference's 95% interval reaches above -3 points."""


def findings(rows: list[dict[str, Any]]) -> list[str]:
    """Per latency, prefix against sync (stop-and-wait: success kept when the difference's 95%
    interval reaches above -3 points, and time to success) and against naive_async (better or
    worse when the interval excludes 0, else not distinguishable); then one line each naming
    the latencies where prefix loses to either."""
    out = []
    short_of_sync: list[str] = []
    worse: list[str] = []
    better: list[str] = []
    by = {(r["latency"], r["strategy"]): r for r in rows}
    for latency in dict.fromkeys(r["latency"] for r in rows):
        p = by.get((latency, "prefix"))
        if p is None:
            continue
        parts = []
        s = by.get((latency, "sync"))
        if s is not None:
            lo, hi = _difference(p, s)
            kept = hi > -SYNC_TOLERANCE
            if not kept:
                short_of_sync.append(latency)
            gap = 100 * (p["success_rate"] - s["success_rate"])
            parts.append(
                f"against sync {s['success_rate']:.0%}: {gap:+.0f} points"
                f" (95% CI {100 * lo:+.0f} to {100 * hi:+.0f}, {'kept' if kept else 'LOST'}),"
                f" time to success {_seconds(p)} vs {_seconds(s)}"
            )
        n = by.get((latency, "naive_async"))
        if n is not None:
            lo, hi = _difference(p, n)
            verdict = "better than" if lo > 0 else "WORSE than" if hi < 0 else "not distinguishable from"
            if lo > 0:
                better.append(latency)
            elif hi < 0:
                worse.append(latency)
            gap = 100 * (p["success_rate"] - n["success_rate"])
            parts.append(
                f"{verdict} naive_async {n['success_rate']:.0%}"
                f" ({gap:+.0f} points, 95% CI {100 * lo:+.0f} to {100 * hi:+.0f})"
            )
        if parts:
            out.append(f"{latency}: prefix {p['success_rate']:.0%}, " + "; ".join(parts))
    if out:
        out.append(
            f"prefix over {len(out)} latencies: short of sync at {', '.join(short_of_sync) or 'none'};"
            f" better than naive_async at {', '.join(better) or 'none'},"
            f" worse at {', '.join(worse) or 'none'}"
        )
    return out


def _difference(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[float, float]:
    return difference_interval(a["success_rate"], a["ci95"], b["success_rate"], b["ci95"])


def _seconds(row: Mapping[str, Any]) -> str:
    t = row["mean_time_to_success_s"]
    return "-" if t is None else f"{t:.2f} s"
