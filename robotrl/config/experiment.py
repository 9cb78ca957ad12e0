"""The ``experiment`` group: `robotrl experiment`'s fine-tuning demo and latency sweep, the
fine-tuning runs the demo may compare, and the seeds its runs use."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from robotrl.config.actor import Strategy
from robotrl.config.bounds import bounds
from robotrl.config.latency import parse_latency
from robotrl.config.learner import AlgorithmKind

if TYPE_CHECKING:
    from robotrl.config.scene import SceneConfig
    from robotrl.config.schema import RobotRLConfig


@dataclass(frozen=True)
class FinetuneRun:
    """One kind of fine-tuning run the demo may compare: its learner and whether the scripted
    expert's takeovers (``env.takeover``, as the preset sets them) stay on while it fine-tunes."""

    algorithm: AlgorithmKind
    learner: dict[str, Any] = field(default_factory=dict)
    """LearnerConfig fields this run sets."""
    takeovers: bool = True


FINETUNE_RUNS: dict[str, FinetuneRun] = {
    "rapi": FinetuneRun(AlgorithmKind.rapi),
    "bc": FinetuneRun(AlgorithmKind.bc),
    # HG-DAgger-style: the same budget of BC updates on the demonstrations and the takeovers'
    # segments alone, none of the policy's own episodes, so no reward selects what it imitates.
    "bc_demos": FinetuneRun(AlgorithmKind.bc, {"anchor_fraction": 1.0, "fastest_successes": 0}),
    # RAPI from its own episodes and reward only: what the takeovers add.
    "rapi_no_takeover": FinetuneRun(AlgorithmKind.rapi, takeovers=False),
}
"""The fine-tuning runs `experiment.algorithms` may list, by name."""

EXPERIMENTS = ("demo", "latency_sweep")


@dataclass
class ExperimentConfig:
    name: str = field(default="demo", metadata=bounds(choices=EXPERIMENTS))
    """Which experiment `robotrl experiment` runs: demo (the fine-tuning demo) or latency_sweep."""
    output_dir: str = "runs/demo"
    """Folder of every artefact; a second run reuses what is there (delete it to start over)."""
    demos: int = field(default=20, metadata=bounds(gt=0))
    """Scripted expert demonstrations recorded for pretraining and the anchor buffer, in the
    source condition (``env.scene``)."""
    shift: dict[str, Any] | None = None
    """The deployment shift: ``env.scene`` fields that the target condition changes (e.g.
    ``{cube_azimuth: [0.55, 0.85]}``). Demonstrations and pretraining see the source condition
    (``env.scene``); validation, every evaluation, the offline control and fine-tuning the
    target. null: no shift (on the command line ``experiment.shift=null``: Hydra merges ``{}``
    into a preset's shift instead of replacing it)."""
    pretrain_steps: int = field(default=4000, metadata=bounds(gt=0))
    """Behaviour-cloning steps of the longest pretraining; the baseline's budget is chosen up to it."""
    select_every: int = field(default=0, metadata=bounds(ge=0, note="0: the last step"))
    """Candidate pretraining budgets: every multiple of this many steps up to ``pretrain_steps``.
    The best offline policy is the candidate with the highest success on the validation seeds
    (the fewest steps among equals). 0: the policy after ``pretrain_steps``, unvalidated."""
    validation_episodes: int = field(default=50, metadata=bounds(gt=0))
    """Episodes per candidate on the validation seeds (apart from every other seed block)."""
    validation_seed: int = 2_000_000
    """Seed of the first validation episode."""
    offline_control: bool = True
    """Also train the offline control: the best offline policy given a fine-tune's number of
    updates (``update_groups`` x ``learner.actor_updates_per_group``) on the demonstrations alone,
    with the fine-tunes' learner settings (``learner.offline``), no online row, no takeover."""
    eval_episodes: int = field(default=50, metadata=bounds(gt=0))
    """Fixed-seed evaluation episodes before and after fine-tuning (same seeds every time)."""
    eval_seed: int = 1_000_000
    """Seed of the first evaluation episode (far from the training seeds)."""
    curve_seed: int = 3_000_000
    """Seed of the first episode of the learning curve's evaluations of the learner's policy
    snapshots: a block apart from the final evaluation's and the online episodes' seeds."""
    curve_episodes: int = field(default=20, metadata=bounds(gt=0))
    """Fixed-seed episodes of each learning-curve evaluation (few: one per snapshot)."""
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
    and, with takeovers, of their segments (HG-DAgger), no online episodes; rapi_no_takeover,
    RAPI without the scripted expert's takeovers."""
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
    vla: str | None = field(default=None, metadata=bounds(choices=("smolvla", "pi05")))
    """A real VLA in place of the built-in policy: the demo makes lerobot's ``smolvla`` or ``pi05``
    offline (``robotrl vla init``, random weights, size ``vla_size``) in the source condition and
    pretrains it on the demonstrations (needs ``policy.kind=lerobot`` and cameras). None: the
    ``policy`` group's built-in policy."""
    vla_size: str = field(default="tiny", metadata=bounds(choices=("tiny", "full")))
    """Size of ``vla``: tiny trains on 2 CPU cores; full has the published shapes (a GPU's)."""
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
    seeds: int = field(default=1, metadata=bounds(gt=0))
    """latency_sweep: policies pretrained on the same demonstrations with seeds seed, seed + 1, ...;
    every cell runs once per policy and the table pools them, so a finding does not rest on one
    pretraining run (floating point differs between machines, and with it the policy)."""
    sweep_episodes: int = field(default=20, metadata=bounds(gt=0))
    """latency_sweep: fixed-seed episodes per (latency, strategy) cell."""
    sweep_workers: int = field(default=0, metadata=bounds(ge=0, note="0: one per core"))
    """latency_sweep: cells evaluated at once, each its own process (0: cores / inference threads)."""


def demo_online_seeds(cfg: RobotRLConfig, run: int, actor: int) -> int:
    """The first online episode seed of ``actor`` in the demo's fine-tuning run ``run`` (from 0):
    each run's actors start one ``launch.actor_seed_stride`` beyond the previous run's last actor."""
    return cfg.actor.seed + (run * cfg.experiment.actors + actor) * cfg.launch.actor_seed_stride


SEED_BLOCKS = {
    "actor.seed": "the fine-tuning runs' online seeds",
    "experiment.eval_seed": "the final evaluation seeds",
    "experiment.validation_seed": "the validation seeds",
    "experiment.curve_seed": "the learning curve's seeds",
}
"""What each block of episode seeds is for, by the field that sets it; a clash names the later."""


def seed_blocks(cfg: RobotRLConfig) -> dict[str, tuple[int, int]]:
    """Every block of episode seeds the demo uses, by the field that sets it: (first, last)."""
    ex = cfg.experiment
    first_online = demo_online_seeds(cfg, 0, 0)
    last_online = demo_online_seeds(cfg, ex.repeats - 1, ex.actors - 1) + ex.online_episodes - 1
    blocks = {
        "actor.seed": (first_online, last_online),
        "experiment.eval_seed": (ex.eval_seed, ex.eval_seed + ex.eval_episodes - 1),
    }
    if ex.select_every:
        blocks["experiment.validation_seed"] = (
            ex.validation_seed,
            ex.validation_seed + ex.validation_episodes - 1,
        )
    blocks["experiment.curve_seed"] = (ex.curve_seed, ex.curve_seed + ex.curve_episodes - 1)
    return blocks


def demo_seed_problems(cfg: RobotRLConfig) -> list[tuple[str, str]]:
    """The demo must never fine-tune, validate or draw its learning curve on its evaluation seeds
    (that would score memorised episodes, or select on them), nor choose its baseline on the
    episodes it fine-tunes on: every seed block stays apart from every other.
    Checked by the demo itself, not by :func:`~robotrl.config.schema.problems`: its steps' own
    processes carry ``actor.seed`` = the evaluation seed beside the experiment group's defaults."""
    ex = cfg.experiment
    if ex.name != "demo" or min(ex.repeats, ex.actors, ex.online_episodes, ex.eval_episodes) < 1:
        return []
    blocks = list(seed_blocks(cfg).items())
    wrong = []
    for i, (name, (lo, hi)) in enumerate(blocks):
        for earlier, (elo, ehi) in blocks[:i]:
            if lo <= ehi and elo <= hi:
                why = f"{SEED_BLOCKS[name]} {lo}-{hi} overlap {SEED_BLOCKS[earlier]} {elo}-{ehi}"
                wrong.append((name, f"{why}: move {name} past them"))
    return wrong


def target_scene(cfg: RobotRLConfig) -> SceneConfig:
    """The deployment (target) condition: ``env.scene`` changed by ``experiment.shift``."""
    return replace(cfg.env.scene, **(cfg.experiment.shift or {}))


def eval_noise_scale(cfg: RobotRLConfig) -> float:
    """The evaluations' inference temperature: ``experiment.eval_noise_scale``, else the policy's."""
    scale = cfg.experiment.eval_noise_scale
    return cfg.policy.noise_scale if scale is None else scale


def vla_problems(cfg: RobotRLConfig) -> list[tuple[str, str]]:
    """A demo of a VLA runs it through the lerobot adapter, from cameras."""
    from robotrl.config.policy import PolicyKind

    if cfg.experiment.vla is None:
        return []
    wrong = []
    if cfg.policy.kind is not PolicyKind.lerobot:
        wrong.append(("policy.kind", f"experiment.vla={cfg.experiment.vla} runs through policy=lerobot"))
    if not cfg.env.cameras:
        wrong.append(("env.cameras", f"experiment.vla={cfg.experiment.vla} reads images: name cameras"))
    return wrong


def shift_problems(cfg: RobotRLConfig) -> list[tuple[str, str]]:
    """``experiment.shift`` names fields of ``env.scene``, each with a value its bounds accept,
    on the task that reads them."""
    from robotrl.config.schema import problems

    shift = cfg.experiment.shift or {}
    if shift and not cfg.env.pick_place:
        return [("experiment.shift", f"only the pick-and-place task reads env.scene, not {cfg.env.id}")]
    known = {f.name for f in fields(cfg.env.scene)}
    unknown = sorted(set(shift) - known)
    if unknown:
        return [("experiment.shift", f"{unknown} are not env.scene fields (those are {sorted(known)})")]
    target = copy.deepcopy(cfg)
    target.env.scene = target_scene(cfg)
    return [
        (name.replace("env.scene.", "experiment.shift."), message)
        for name, message in problems(target)
        if name.startswith("env.scene.")
    ]
