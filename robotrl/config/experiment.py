"""The ``experiment`` group: `robotrl experiment`'s fine-tuning demo and latency sweep, the
fine-tuning runs the demo may compare, and the seeds its runs use."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from robotrl.config.actor import Strategy
from robotrl.config.bounds import bounds
from robotrl.config.latency import parse_latency
from robotrl.config.learner import AlgorithmKind

if TYPE_CHECKING:
    from robotrl.config.schema import RobotRLConfig

FINETUNE_RUNS: dict[str, tuple[AlgorithmKind, dict[str, Any]]] = {
    "rapi": (AlgorithmKind.rapi, {}),
    "bc": (AlgorithmKind.bc, {}),
    # Continued imitation: the same budget of BC updates on the demonstrations alone (and any
    # human interventions), none of the policy's own episodes, so no reward selects what it imitates.
    "bc_demos": (AlgorithmKind.bc, {"anchor_fraction": 1.0, "fastest_successes": 0}),
}
"""The fine-tuning runs `experiment.algorithms` may list: name -> (learner.algorithm, learner fields)."""

EXPERIMENTS = ("demo", "latency_sweep")


@dataclass
class ExperimentConfig:
    name: str = field(default="demo", metadata=bounds(choices=EXPERIMENTS))
    """Which experiment `robotrl experiment` runs: demo (the fine-tuning demo) or latency_sweep."""
    output_dir: str = "runs/demo"
    """Folder of every artefact; a second run reuses what is there (delete it to start over)."""
    demos: int = field(default=20, metadata=bounds(gt=0))
    """Scripted expert demonstrations recorded for pretraining and the anchor buffer."""
    pretrain_steps: int = field(default=4000, metadata=bounds(gt=0))
    """Behaviour-cloning steps of the pretrained baseline."""
    eval_episodes: int = field(default=50, metadata=bounds(gt=0))
    """Fixed-seed evaluation episodes before and after fine-tuning (same seeds every time)."""
    eval_seed: int = 1_000_000
    """Seed of the first evaluation episode (far from the training seeds)."""
    online_episodes: int = field(default=40, metadata=bounds(gt=0))
    """Online episodes per actor in each fine-tuning run: the budget, equal for rapi and bc."""
    update_groups: int = field(default=200, metadata=bounds(gt=0))
    """Learner update groups in each fine-tuning run (also equal for rapi and bc)."""
    actors: int = field(default=1, metadata=bounds(gt=0))
    """Actor processes in each fine-tuning run."""
    algorithms: list[str] = field(
        default_factory=lambda: ["rapi", "bc"],
        metadata=bounds(choices=tuple(FINETUNE_RUNS), nonempty=True, distinct=True),
    )
    """Fine-tuning runs to compare (FINETUNE_RUNS): rapi; bc on the same buffers as rapi (its anchor
    keeps the fastest successes too); bc_demos, continued imitation of the anchor's demonstrations
    (and, with takeovers, of their segments: HG-DAgger's data), no online episodes."""
    repeats: int = field(default=1, metadata=bounds(gt=0))
    """Fine-tuning runs per algorithm, each with its own seeds (learner seed + k, online episode
    seeds one actor stride further per actor): one run's success moves by ~10 points from run to
    run here, more than its interval says. The table pools every run's evaluation episodes (the
    Wilson interval counts episodes, so run-to-run spread shows in the per-run rates beside it)."""
    finetune_workers: int = field(default=1, metadata=bounds(gt=0))
    """Fine-tuning runs at once, each its own `robotrl launch` (its output in its folder's
    output.log, progress lines in the demo's), then their evaluations as many at once: the learner
    and the actor of one run wait on each other in virtual time, so two runs share two cores with
    little loss, and an evaluation is one single-threaded process."""
    rerun_episodes: int = field(default=2, metadata=bounds(ge=0))
    """Episodes of the fine-tuned policy recorded to demo.rrd (0: none)."""
    eval_noise_scale: float | None = field(
        default=None, metadata=bounds(ge=0, le=2, note="0: deterministic chunks")
    )
    """Inference temperature of the fixed-seed evaluations and the rerun view (flow policy):
    0 scores each policy's deterministic chunk, as RL scores the mean action, while fine-tuning
    still explores at policy.noise_scale. None: policy.noise_scale everywhere."""
    checkpoint: str | None = None
    """latency_sweep: the policy checkpoint to sweep (default: the demo's pretrained policy)."""
    latencies: list[str] = field(
        default_factory=lambda: [
            "constant:0",
            "constant:0.05",
            "constant:0.1",
            "constant:0.2",
            "constant:0.4",
            "lognormal:0.15",
            "spike_mixture:0.15",
        ],
        metadata=bounds(each=parse_latency, nonempty=True, distinct=True),
    )
    """latency_sweep: latency models as kind:median_s (kinds of actor.latency.kind), each once."""
    strategies: list[str] = field(
        default_factory=lambda: ["sync", "naive_async", "blend", "prefix"],
        metadata=bounds(choices=tuple(s.value for s in Strategy), nonempty=True, distinct=True),
    )
    """latency_sweep: execution strategies to compare, each once."""
    sweep_episodes: int = field(default=20, metadata=bounds(gt=0))
    """latency_sweep: fixed-seed episodes per (latency, strategy) cell."""
    sweep_workers: int = field(default=0, metadata=bounds(ge=0, note="0: one per core"))
    """latency_sweep: cells evaluated at once, each its own process (0: cores / inference threads)."""


def demo_online_seeds(cfg: RobotRLConfig, run: int, actor: int) -> int:
    """The first online episode seed of ``actor`` in the demo's fine-tuning run ``run`` (from 0):
    each run's actors start one ``launch.actor_seed_stride`` beyond the previous run's last actor."""
    return cfg.actor.seed + (run * cfg.experiment.actors + actor) * cfg.launch.actor_seed_stride


def demo_seed_problems(cfg: RobotRLConfig) -> list[tuple[str, str]]:
    """The demo must never fine-tune on its evaluation seeds (that would score memorised episodes).
    Checked by the demo itself, not by :func:`~robotrl.config.schema.problems`: its steps' own
    processes carry ``actor.seed`` = the evaluation seed beside the experiment group's defaults."""
    ex = cfg.experiment
    if ex.name != "demo" or min(ex.repeats, ex.actors, ex.online_episodes, ex.eval_episodes) < 1:
        return []
    first = demo_online_seeds(cfg, 0, 0)
    last = demo_online_seeds(cfg, ex.repeats - 1, ex.actors - 1) + ex.online_episodes - 1
    if first <= ex.eval_seed + ex.eval_episodes - 1 and ex.eval_seed <= last:
        return [
            (
                "experiment.eval_seed",
                f"the evaluation seeds {ex.eval_seed}-{ex.eval_seed + ex.eval_episodes - 1} overlap "
                f"the fine-tuning runs' online seeds {first}-{last}: move experiment.eval_seed past them",
            )
        ]
    return []
