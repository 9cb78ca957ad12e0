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
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from robotrl.config.actor import Strategy
from robotrl.config.latency import parse_latency
from robotrl.config.schema import RobotRLConfig
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


def sweep_policy(cfg: RobotRLConfig, console: Console) -> str:
    """The checkpoint to sweep: ``experiment.checkpoint`` (or ``policy.path``) when set; otherwise
    the demo's first steps, cached in ``experiment.output_dir``: record ``experiment.demos`` expert
    demonstrations of the task and pretrain the policy on them."""
    path = cfg.experiment.checkpoint or cfg.policy.path
    if path:
        if not Path(path).is_dir():
            raise FileNotFoundError(f"experiment.checkpoint: no policy checkpoint at {path}")
        return path
    from robotrl.experiment.demo import Demo
    from robotrl.experiment.steps import Steps

    demo = Demo(cfg, console)
    demo.steps = Steps(2, console)  # only its record and pretrain steps
    demo.record()
    demo.pretrain()
    return str(demo.pretrained)


def run_sweep(cfg: RobotRLConfig) -> int:
    from robotrl.experiment.plots import sweep_plot

    console = Console()
    ex = cfg.experiment
    policy = sweep_policy(cfg, console)
    out = Path(ex.output_dir) / SWEEP_DIR
    out.mkdir(parents=True, exist_ok=True)
    cells = cell_jobs(cfg, policy, out / "cells")
    jobs = list(cells)
    workers = min(sweep_workers(ex.sweep_workers), len(jobs))
    console.rule(f"[bold]latency sweep: {len(jobs)} cells x {ex.sweep_episodes} episodes of {cfg.env.id}")
    console.print(
        f"policy {policy}; seeds {ex.eval_seed}..{ex.eval_seed + ex.sweep_episodes - 1} in every cell;"
        f" {workers} cells at a time, each cell's output in {out / 'cells'}/<cell>/output.log"
    )
    rows: dict[Job, dict[str, Any]] = {}
    start = time.perf_counter()

    def cell_done(done: JobDone) -> None:
        summary = json.loads((done.job.out_dir / "eval_summary.json").read_text())
        latency, strategy = cells[done.job]
        rows[done.job] = {"latency": latency, "strategy": strategy, **_row(summary)}
        ordered = [rows[job] for job in jobs if job in rows]
        (out / "results.json").write_text(json.dumps({"policy": policy, "rows": ordered}, indent=1))
        lo, hi = summary["ci95"]
        took = "cached" if done.cached else f"{done.seconds:.0f} s"
        console.print(
            f"[{len(rows)}/{len(jobs)}] {done.job.title}: {summary['success_rate']:.0%} [{lo:.0%}-{hi:.0%}],"
            f" {summary['starved_ticks']} starved ticks ({took}; {time.perf_counter() - start:.0f} s so far)"
        )

    run_parallel(jobs, workers, cell_done)
    ordered = [rows[job] for job in jobs]
    plot = sweep_plot(ordered, out / "sweep.png")
    console.print(table(ordered, f"{cfg.env.id}: {ex.sweep_episodes} fixed-seed episodes per cell"))
    for finding in findings(ordered):
        console.print(finding)
    console.print(
        f"table: {out / 'results.json'}\nplot: {plot}\nwall time {time.perf_counter() - start:.0f} s"
    )
    return 0


def cell_jobs(cfg: RobotRLConfig, policy: str, cells_dir: Path) -> dict[Job, tuple[str, str]]:
    """One `robotrl eval` per (latency, strategy), latency-major, each in its own folder."""
    identity = (("policy", checkpoint_identity(Path(policy))),)
    complete = functools.partial(ran_every_episode, episodes=cfg.experiment.sweep_episodes)
    jobs = {}
    for latency in cfg.experiment.latencies:
        for strategy in cfg.experiment.strategies:
            out_dir = cells_dir / f"{latency.replace(':', '_')}_{strategy}"
            overrides = config_overrides(
                cell_config(cfg, latency, strategy, policy), ["env", "policy", "actor"]
            )
            argv = robotrl("eval", *overrides, f"seed={cfg.seed}", f"run_dir={out_dir}")
            jobs[Job(f"{latency} {strategy}", out_dir, tuple(argv), identity, complete)] = (latency, strategy)
    return jobs


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


def _row(summary: dict[str, Any]) -> dict[str, Any]:
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


def findings(rows: list[dict[str, Any]]) -> list[str]:
    """prefix versus naive_async per latency: success better or worse when the 95% interval of
    the difference excludes 0 (else not distinguishable), that interval, and each one's jerk;
    then one line naming the latencies where prefix is better and where it is worse."""
    out = []
    verdicts: dict[str, list[str]] = {"better than": [], "WORSE than": []}
    by = {(r["latency"], r["strategy"]): r for r in rows}
    for latency in dict.fromkeys(r["latency"] for r in rows):
        p, n = by.get((latency, "prefix")), by.get((latency, "naive_async"))
        if p is None or n is None:
            continue
        lo, hi = difference_interval(p["success_rate"], p["ci95"], n["success_rate"], n["ci95"])
        if lo > 0:
            verdict = "better than"
        elif hi < 0:
            verdict = "WORSE than"
        else:
            verdict = "not distinguishable from"
        verdicts.get(verdict, []).append(latency)
        out.append(
            f"{latency}: prefix {p['success_rate']:.0%} is {verdict} naive_async {n['success_rate']:.0%}"
            f" (difference {100 * (p['success_rate'] - n['success_rate']):+.0f} points, 95% CI"
            f" {100 * lo:+.0f} to {100 * hi:+.0f}); jerk RMS {p['jerk_rms']:.0f} vs {n['jerk_rms']:.0f}"
        )
    if out:
        better, worse = verdicts["better than"], verdicts["WORSE than"]
        out.append(
            f"prefix versus naive_async over {len(out)} latencies: better at {', '.join(better) or 'none'};"
            f" worse at {', '.join(worse) or 'none'}"
        )
    return out
