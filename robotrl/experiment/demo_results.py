"""The demo's results: what ``results.json`` records of a demo run and the table of every
policy it prints (:mod:`robotrl.experiment.demo` runs the steps)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from robotrl.actor.report import outcome_text
from robotrl.config.experiment import eval_noise_scale, target_scene
from robotrl.config.schema import RobotRLConfig
from robotrl.core import run_folder
from robotrl.core.run_folder import EvalSummary
from robotrl.core.types import OUTCOME_SUCCESS
from robotrl.experiment.baselines import BEST_OFFLINE, CONTROL, BestOffline
from robotrl.experiment.steps import Steps

POLICY_FIGURES = (
    "episodes",
    "success_rate",
    "ci95",
    "runs",
    "mean_time_to_success_s",
    "jerk_rms",
    "starved_ticks",
)
"""What the results keep of each policy's evaluation (``runs``: a fine-tuned policy's per-run success)."""


def latency_text(cfg: RobotRLConfig) -> str:
    lat = cfg.actor.latency
    return f"{lat.kind.value} median {lat.median_s * 1e3:.0f} ms"


BASELINES = (BEST_OFFLINE, CONTROL, "bc", "bc_demos", "rapi_no_takeover")
"""What RAPI's fine-tuned policy is compared with, when the demo ran it."""


def shift_text(cfg: RobotRLConfig) -> str:
    """The deployment shift in words: which ``env.scene`` fields the target condition changes."""
    shift = cfg.experiment.shift or {}
    if not shift:
        return "no deployment shift: demonstrations, fine-tuning and evaluation share one condition"
    changes = ", ".join(f"{k} {getattr(cfg.env.scene, k)} -> {v}" for k, v in shift.items())
    return f"deployment shift (demonstrations in the source, the rest in the target): {changes}"


def demo_results(
    cfg: RobotRLConfig, evals: Mapping[str, EvalSummary], best: BestOffline, wall_s: float, steps: Steps
) -> dict[str, Any]:
    """The results of a demo whose evaluations (the best offline policy's, the offline control's
    and each fine-tuning algorithm's, pooled over its runs) are ``evals``."""
    ex = cfg.experiment
    ci = {name: evals[name]["ci95"] for name in evals}

    def rapi_beats(baseline: str) -> bool | None:
        if "rapi" not in ci or baseline not in ci:
            return None
        return bool(ci["rapi"][0] > ci[baseline][1])  # the intervals do not overlap

    return {
        "success": {name: e["success_rate"] for name, e in evals.items()},
        "ci95": ci,
        "best_offline_steps": best.steps,
        "best_offline_control_groups": best.control_groups,
        "validation_success": {str(steps): rate for steps, rate in best.validation.items()},
        "control_validation_success": {str(group): rate for group, rate in best.control_validation.items()},
        "offline_control_updates": ex.update_groups * cfg.learner.actor_updates_per_group
        if CONTROL in evals
        else None,
        "rapi_beats_beyond_ci": {name: rapi_beats(name) for name in BASELINES if name in evals},
        "shift": dict(ex.shift or {}),
        "episodes": ex.eval_episodes,
        "repeats": ex.repeats,
        "wall_s": round(wall_s, 1),
        "per_policy": {name: _figures(e) | {"outcomes": e.get("outcomes", {})} for name, e in evals.items()},
        "setting": _setting(cfg),
        "step_seconds": steps.seconds,
        "cached_steps": steps.cached,
    }


def _figures(summary: Mapping[str, Any]) -> dict[str, Any]:
    return {k: summary[k] for k in POLICY_FIGURES if k in summary}


def _setting(cfg: RobotRLConfig) -> dict[str, Any]:
    ex = cfg.experiment
    return {
        "env": cfg.env.id,
        "cameras": list(cfg.env.cameras),
        "privileged_state": cfg.env.privileged_state,
        "policy_size": cfg.policy.size.value,
        "strategy": cfg.actor.strategy.value,
        "noise_scale": {"online": cfg.policy.noise_scale, "eval": eval_noise_scale(cfg)},
        "latency": latency_text(cfg),
        "control_hz": cfg.env.control_hz,
        "demos": ex.demos,
        "pretrain_steps": ex.pretrain_steps,
        "source_scene": dataclasses.asdict(cfg.env.scene),
        "target_scene": dataclasses.asdict(target_scene(cfg)),
        "validation_seeds": [ex.validation_seed, ex.validation_seed + ex.validation_episodes - 1]
        if ex.select_every
        else None,
        "online_episodes_per_actor": ex.online_episodes,
        "actors": ex.actors,
        "update_groups": ex.update_groups,
        "eval_seeds": [ex.eval_seed, ex.eval_seed + ex.eval_episodes - 1],
    }


def _policy_names(cfg: RobotRLConfig, best: BestOffline) -> dict[str, str]:
    per_group = cfg.learner.actor_updates_per_group
    updates = cfg.experiment.update_groups * per_group
    return {
        BEST_OFFLINE: f"best offline policy ({best.describe(per_group)})",
        CONTROL: f"offline control (+{updates} BC updates on the demos)",
        "rapi": "+ online RAPI",
        "bc": "+ online BC on RAPI's buffers",
        # the anchor it reads holds the takeovers' segments beside the demos (HG-DAgger's data)
        "bc_demos": "+ HG-DAgger (BC on the demos and takeovers)"
        if cfg.env.takeover.enabled
        else "+ BC on the demos only",
        "rapi_no_takeover": "+ online RAPI without takeovers",
    }


def results_table(cfg: RobotRLConfig, evals: Mapping[str, EvalSummary], best: BestOffline) -> Table:
    """One row per policy: success with its interval (and per run), time to success, jerk, starvation."""
    repeats = cfg.experiment.repeats
    pooled = f", fine-tuned policies pooled over {repeats} runs each" if repeats > 1 else ""
    ex = cfg.experiment
    policy = f"{ex.vla_size} {ex.vla}" if ex.vla else f"noise scale {eval_noise_scale(cfg):g}"
    table = Table(title=f"{cfg.env.id}: {ex.eval_episodes} fixed-seed episodes per policy{pooled}, {policy}")
    columns = ["policy", "success", "95% CI", *(["per run"] if repeats > 1 else [])]
    # per episode: a pooled row counts K times the episodes of the pretrained one
    for col in (*columns, "time to success", "jerk RMS", "starved ticks / episode"):
        table.add_column(col, justify="right" if col != "policy" else "left")
    names = _policy_names(cfg, best)
    for name, e in evals.items():
        lo, hi = e["ci95"]
        tts = e["mean_time_to_success_s"]
        table.add_row(
            names.get(name, name),
            f"{e['success_rate']:.0%}",
            f"{lo:.0%}-{hi:.0%}",
            *([", ".join(f"{r:.1%}" for r in e.get("runs", []))] if repeats > 1 else []),
            "-" if tts is None else f"{tts:.2f} s",
            f"{e['jerk_rms']:.0f}",
            f"{e['starved_ticks'] / e['episodes']:.2f}",
        )
    return table


def print_results(
    console: Console,
    cfg: RobotRLConfig,
    evals: Mapping[str, EvalSummary],
    best: BestOffline,
    results: Mapping[str, Any],
    curve: Path,
    recording: Path | None,
) -> None:
    """The table, how the failed episodes ended, RAPI against each baseline, and where the files are."""
    console.print(shift_text(cfg))
    console.print(results_table(cfg, evals, best))
    names = _policy_names(cfg, best)
    failures = {name: e["outcomes"] for name, e in evals.items() if e.get("outcomes")}
    if failures:  # evaluations cached before outcomes were counted have none
        console.print("how the failed episodes ended:")
        for name, outcomes in failures.items():
            failed = outcome_text(outcomes, skip=OUTCOME_SUCCESS)
            console.print(f"  {names.get(name, name)} (of {evals[name]['episodes']}): {failed}")
    for baseline in BASELINES:
        if "rapi" in evals and baseline in evals:
            console.print(
                f"RAPI vs {names[baseline].removeprefix('+ ')}: "
                + _compare(evals["rapi"]["ci95"], evals[baseline]["ci95"])
            )
    out = Path(cfg.experiment.output_dir)
    console.print(
        f"results: {out / run_folder.RESULTS}\nlearning curves: {curve}\n"
        + (f"rerun recording: {recording}  (open with: rerun {recording})\n" if recording else "")
        + f"logs of every role: {out}/finetune_*/{run_folder.LOGS}/\n"
        + f"total wall time {results['wall_s']:.0f} s"
    )


def _compare(rapi: list[float], baseline: list[float]) -> str:
    """How RAPI's 95% interval of success stands to a baseline's."""
    if rapi[0] > baseline[1]:
        return "RAPI is better beyond the 95% intervals."
    if rapi[1] < baseline[0]:
        return "RAPI is worse beyond the 95% intervals."
    return "the 95% intervals overlap; neither is better beyond them."
