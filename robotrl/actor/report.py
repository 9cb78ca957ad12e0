"""Reports of actor episodes: the summary `robotrl eval` prints and writes, one record per
episode, the progress an actor rewrites after every episode, and its sent-rows audit."""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from robotrl.actor.loop import EpisodeResult
from robotrl.core.run_folder import ActorProgress, EpisodeRecord, EvalSummary, SentRecord, write_sent_record


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a success rate (sane at 0% and 100%, unlike the normal one)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def chunk_too_short(p90_delay_ticks: float | None, horizon: int, margin_ticks: int) -> str | None:
    """Why the robot starves every chunk, or None: with one inference in flight, a chunk that
    arrives after ``d`` ticks leaves ``H - d`` planned ticks, and the next one takes ``d`` again;
    past ``d + margin > H - d`` the plan runs out before each new chunk, whatever the strategy."""
    if p90_delay_ticks is None or 2 * p90_delay_ticks + margin_ticks <= horizon:
        return None
    longest = (horizon - margin_ticks) // 2
    needed = 2 * math.ceil(p90_delay_ticks) + margin_ticks
    return (
        f"inference takes {p90_delay_ticks:.0f} ticks (p90), more than the {longest} a {horizon}-step "
        f"chunk can hide (one inference in flight, margin {margin_ticks}): the robot holds still "
        f"before every new chunk. Use a longer policy.horizon (>= {needed}), a faster policy or host, or"
        " pipelined inference (actor.max_in_flight > 1) with a server that computes several at once."
    )


def summarize(results: Sequence[EpisodeResult], control_hz: float, wall_clock: bool) -> EvalSummary:
    """One flat dict of the headline figures over ``results``."""
    n = len(results)
    successes = [r for r in results if r.success]
    lo, hi = wilson_interval(len(successes), n)
    delays = [d for r in results for d in r.delays[1:]]  # the first chunk of an episode is waited for
    lateness = np.array([x for r in results for x in r.lateness_ms]) if wall_clock else np.zeros(0)
    refused: Counter[str] = Counter()
    for r in results:
        refused.update(r.chunks_refused)
    summary: EvalSummary = {
        "episodes": n,
        "success_rate": len(successes) / n if n else 0.0,
        "ci95": [round(lo, 4), round(hi, 4)],
        "mean_time_to_success_s": (
            float(np.mean([r.success_tick for r in successes if r.success_tick is not None])) / control_hz
            if successes
            else None
        ),
        "starved_ticks": sum(r.starved_ticks for r in results),
        "missed_deadlines": sum(r.missed_deadlines for r in results),
        "jerk_rms": float(np.mean([r.jerk_rms for r in results])) if n else 0.0,
        "mean_delay_ticks": float(np.mean(delays)) if delays else None,
        "p90_delay_ticks": float(np.quantile(delays, 0.9)) if delays else None,
        "chunks_merged": sum(r.chunks_merged for r in results),
        "chunks_refused": dict(refused),
        "inference_errors": sum(r.inference_errors for r in results),
        "prefix_overruns": sum(r.prefix_overruns for r in results),
        "clamped_ticks": sum(r.clamped_ticks for r in results),
        "intervention_ticks": sum(r.intervention_ticks for r in results),
        "outcomes": dict(Counter(r.outcome for r in results if r.outcome).most_common()),
        "failures": [r.failure for r in results if r.failure],
        "ticks": sum(r.ticks for r in results),
    }
    if wall_clock and len(lateness):
        summary["jitter_p50_ms"] = float(np.quantile(lateness, 0.5))
        summary["jitter_p99_ms"] = float(np.quantile(lateness, 0.99))
    return summary


def episode_rows(results: Sequence[EpisodeResult]) -> list[EpisodeRecord]:
    """One record per episode: which seeds failed, and how."""
    return [
        EpisodeRecord(
            episode=r.episode_id,
            seed=r.seed,
            success=r.success,
            outcome=r.outcome,
            ticks=r.ticks,
            success_tick=r.success_tick,
            reward=r.total_reward,
            starved_ticks=r.starved_ticks,
            intervention_ticks=r.intervention_ticks,
            policy_versions=sorted(set(r.policy_versions)),
            failure=r.failure,
        )
        for r in results
    ]


def actor_progress(
    results: Sequence[EpisodeResult], backlog: int, rows_sent: int, refused_rows: int
) -> ActorProgress:
    """What `robotrl launch` shows of an actor after ``results``: episodes, successes, the
    newest policy version executed, and its transport's ``backlog``, rows handed over and refused."""
    versions = [v for r in results for v in r.policy_versions]
    return ActorProgress(
        episodes=len(results),
        successes=sum(r.success for r in results),
        ticks=sum(r.ticks for r in results),
        policy_version=max(versions, default=-1),
        last_success=bool(results[-1].success),
        backlog=backlog,
        rows_sent=rows_sent,
        refused_rows=refused_rows,
        missed_deadlines=sum(r.missed_deadlines for r in results),
        time=round(time.time(), 3),
        taken_over=sum(r.intervention_ticks > 0 for r in results),
        history=[
            [int(r.success and not r.intervention_ticks), max(r.policy_versions, default=-1)] for r in results
        ],
    )


class SentAudit:
    """Rewrites the actor's sent-rows record with the rows this actor incarnation's transport
    has numbered and kept, after each batch (``actor.audit_sent``): what the soak bench audits
    after killing the actor. The batch ``seq`` names may already be on disk when a kill stops
    the rewrite."""

    def __init__(self, run_dir: Path, actor_id: str) -> None:
        self.run_dir, self.actor_id = run_dir, actor_id
        self.rows = 0
        run_dir.mkdir(parents=True, exist_ok=True)

    def __call__(self, stream: str, seq: int, rows: int) -> None:
        self.rows += rows
        write_sent_record(self.run_dir, self.actor_id, SentRecord(stream=stream, rows=self.rows, seq=seq))


def outcome_text(outcomes: Mapping[str, int], skip: str | None = None) -> str:
    """``{"success": 94, "cube never moved": 24}`` as "94 success, 24 cube never moved" (most first),
    leaving out the outcome ``skip``."""
    ranked = sorted(outcomes.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{n} {name}" for name, n in ranked if name != skip) or "-"


def pool_summaries(summaries: Sequence[EvalSummary]) -> EvalSummary:
    """The headline figures of several evaluations of the same kind of policy (one per fine-tuning
    run) as one: success and its Wilson interval over every episode, time to success over every
    success, jerk and starvation over every episode, outcomes summed, and ``runs``, each run's
    own success rate (the pooled interval counts episodes, so run-to-run spread shows there)."""
    if not summaries:
        raise ValueError("no evaluations to pool")
    episodes = [int(s["episodes"]) for s in summaries]
    successes = [round(s["success_rate"] * n) for s, n in zip(summaries, episodes, strict=True)]
    n, won = sum(episodes), sum(successes)
    lo, hi = wilson_interval(won, n)
    timed = [  # a run with successes has a time to success
        (t, k)
        for s, k in zip(summaries, successes, strict=True)
        if k and (t := s["mean_time_to_success_s"]) is not None
    ]
    outcomes: Counter[str] = Counter()
    for s in summaries:
        outcomes.update(s.get("outcomes", {}))
    return {
        "episodes": n,
        "success_rate": won / n if n else 0.0,
        "ci95": [round(lo, 4), round(hi, 4)],
        "mean_time_to_success_s": sum(t * k for t, k in timed) / sum(k for _, k in timed) if timed else None,
        "jerk_rms": sum(s["jerk_rms"] * k for s, k in zip(summaries, episodes, strict=True)) / n
        if n
        else 0.0,
        "starved_ticks": sum(int(s["starved_ticks"]) for s in summaries),
        "outcomes": dict(outcomes.most_common()),
        "runs": [s["success_rate"] for s in summaries],
    }


def takeover_rows(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A warning row when the scripted expert drove some ticks: those successes are partly its."""
    ticks = summary.get("intervention_ticks", 0)
    if not ticks:
        return []
    return [
        (
            "expert takeover ticks",
            f"{ticks}: successes include the expert's; to score the policy alone set "
            "env.takeover.on_miss=false env.takeover.before_miss=false env.takeover.ticks=0",
        )
    ]


def print_summary(summary: Mapping[str, Any]) -> None:
    """The summary as a table on the terminal."""
    table = Table(title=f"{summary['env']}  strategy={summary['strategy']}  latency={summary['latency']}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    lo, hi = summary["ci95"]
    tts, delay = summary["mean_time_to_success_s"], summary["mean_delay_ticks"]
    rows = [
        ("episodes", summary["episodes"]),
        ("success rate", f"{summary['success_rate']:.1%}  (95% CI {lo:.1%}-{hi:.1%})"),
        *takeover_rows(summary),
        ("mean time to success", "-" if tts is None else f"{tts:.2f} s"),
        ("starved ticks", summary["starved_ticks"]),
        ("action jerk (RMS)", f"{summary['jerk_rms']:.1f}"),
        ("mean delay", "-" if delay is None else f"{delay:.2f} ticks"),
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
