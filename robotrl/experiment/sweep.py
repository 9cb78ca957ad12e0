"""`robotrl experiment experiment=latency_sweep`: one checkpoint under every latency model and
execution strategy, in virtual time on fixed seeds, as a table, a JSON file and a plot.

Each cell runs the serial runner (policy in this process, latency drawn from the model,
no sleeping), so the sweep is exact, reproducible and much faster than real time; the
same seeds are used in every cell, so cells differ only by latency and strategy. Without
``experiment.checkpoint`` the demo's record and pretrain steps make the policy first
(cached in ``experiment.output_dir``).
"""

from __future__ import annotations

import copy
import json
import math
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from robotrl.config.schema import RobotRLConfig, Strategy, parse_latency

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
    from robotrl.actor.run import run_episodes
    from robotrl.experiment.plots import sweep_plot

    console = Console()
    ex = cfg.experiment
    policy = sweep_policy(cfg, console)
    out = Path(ex.output_dir) / SWEEP_DIR
    out.mkdir(parents=True, exist_ok=True)
    cells = [(lat, s) for lat in ex.latencies for s in ex.strategies]
    console.rule(f"[bold]latency sweep: {len(cells)} cells x {ex.sweep_episodes} episodes of {cfg.env.id}")
    console.print(
        f"policy {policy}; seeds {ex.eval_seed}..{ex.eval_seed + ex.sweep_episodes - 1} in every cell"
    )
    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    for i, (latency, strategy) in enumerate(cells, 1):
        summary = run_episodes(
            cell_config(cfg, latency, strategy, policy), None, f"[{i}/{len(cells)}] {latency} {strategy}"
        )
        rows.append({"latency": latency, "strategy": strategy, **_row(summary)})
        (out / "results.json").write_text(json.dumps({"policy": policy, "rows": rows}, indent=1))
    plot = sweep_plot(rows, out / "sweep.png")
    console.print(table(rows, f"{cfg.env.id}: {ex.sweep_episodes} fixed-seed episodes per cell"))
    for finding in findings(rows):
        console.print(finding)
    console.print(
        f"table: {out / 'results.json'}\nplot: {plot}\nwall time {time.perf_counter() - start:.0f} s"
    )
    return 0


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
    out = Table(title=title)
    for col in (
        "latency",
        "strategy",
        "success",
        "95% CI",
        "time to success",
        "jerk RMS",
        "starved",
        "delay",
    ):
        key = col in ("latency", "strategy")
        out.add_column(col, justify="left" if key else "right", no_wrap=key)
    for r in rows:
        lo, hi = r["ci95"]
        tts = r["mean_time_to_success_s"]
        delay = r["mean_delay_ticks"]
        out.add_row(
            r["latency"],
            r["strategy"],
            f"{r['success_rate']:.0%}",
            f"{lo:.0%}-{hi:.0%}",
            "-" if tts is None else f"{tts:.2f} s",
            f"{r['jerk_rms']:.0f}",
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
    """prefix versus naive_async per latency: success better, worse or within the intervals, the
    interval of the difference, and the action jerk of each (measured)."""
    out = []
    by = {(r["latency"], r["strategy"]): r for r in rows}
    for latency in dict.fromkeys(r["latency"] for r in rows):
        p, n = by.get((latency, "prefix")), by.get((latency, "naive_async"))
        if p is None or n is None:
            continue
        if p["ci95"][0] > n["ci95"][1]:
            verdict = "better than"
        elif p["ci95"][1] < n["ci95"][0]:
            verdict = "WORSE than"
        else:
            verdict = "within the 95% intervals of"
        lo, hi = difference_interval(p["success_rate"], p["ci95"], n["success_rate"], n["ci95"])
        out.append(
            f"{latency}: prefix {p['success_rate']:.0%} is {verdict} naive_async {n['success_rate']:.0%}"
            f" (difference {100 * (p['success_rate'] - n['success_rate']):+.0f} points, 95% CI"
            f" {100 * lo:+.0f} to {100 * hi:+.0f}); jerk RMS {p['jerk_rms']:.0f} vs {n['jerk_rms']:.0f}"
        )
    return out
