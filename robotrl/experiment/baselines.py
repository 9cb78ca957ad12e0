"""The demo's offline baselines, what a fine-tune must beat to count.

- The **starting point**: behaviour cloning on the demonstrations, its pretraining budget
  chosen among the kept snapshots (``experiment.select_every``) by success on validation seeds
  in the deployment (target) condition, apart from every evaluation seed. Validation loss does
  not track success here, so success chooses. The fine-tunes and the control start from it.
- The **offline control**: that policy given a fine-tune's number of updates on the
  demonstrations alone (``learner.offline``): the learner's own BC update, the fine-tunes' learner
  settings, no online row, no takeover. What a fine-tune adds beyond it comes from online data.
- The **best offline policy**: the best on the same validation seeds among the pretraining's
  snapshots and the control's (``learner.snapshot_every_groups``), so that training offline for
  longer, the control's way, never leaves the baseline short of what the demonstrations give.
"""

from __future__ import annotations

import functools
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from robotrl.config.env import TakeoverConfig
from robotrl.config.learner import AlgorithmKind
from robotrl.core import run_folder
from robotrl.core.policy_snapshots import pretrain_snapshots, read_policy_snapshots
from robotrl.experiment.curve import export_snapshot, snapshot_identity
from robotrl.experiment.parallel import Job
from robotrl.experiment.steps import config_overrides, is_cached, ran_every_episode, robotrl, run_id, step_key

if TYPE_CHECKING:
    from robotrl.config.schema import RobotRLConfig
    from robotrl.experiment.demo import Demo

BEST_OFFLINE = "best_offline"
"""The best offline policy's name in the results; its evaluation is ``eval_best_offline``."""
CONTROL = "offline_control"
"""The offline control's name: its run folder is ``finetune_offline_control``, its evaluation
``eval_offline_control``."""


@dataclass(frozen=True)
class BestOffline:
    """An offline policy chosen on the validation seeds: its pretraining budget and the offline
    control's update groups on top (0: a pretraining snapshot), and every candidate's success."""

    steps: int
    policy: Path
    made_by: Path
    """The output folder of the step that made ``policy`` (its evaluation's input)."""
    validation: dict[int, float]
    """Pretraining steps -> success on the validation seeds (empty when nothing was validated)."""
    control_groups: int = 0
    """The offline control's update groups that made ``policy`` from the pretraining snapshot."""
    control_validation: dict[int, float] = field(default_factory=dict)
    """The offline control's update groups -> its snapshot's success on the validation seeds."""

    def describe(self, updates_per_group: int) -> str:
        """What made the policy: "BC, 12000 steps", or with the control's updates on top."""
        more = f" + {self.control_groups * updates_per_group} control updates" if self.control_groups else ""
        return f"BC, {self.steps} steps{more}"


def candidates(demo: Demo) -> dict[int, Path]:
    """Pretraining steps -> the policy kept then; the last pretrained policy alone when the demo
    chooses no budget (``experiment.select_every=0``)."""
    ex = demo.ex
    kept = pretrain_snapshots(demo.out / "pretrain") if ex.select_every else {}
    # a snapshot left by a pretraining of other settings is no candidate
    kept = {s: path for s, path in kept.items() if s <= ex.pretrain_steps and s % ex.select_every == 0}
    return kept or {demo.ex.pretrain_steps: demo.pretrained}


def validation_dir(demo: Demo, steps: int) -> Path:
    return demo.out / "validate" / f"step-{steps:08d}"


def choose_best_offline(demo: Demo) -> BestOffline:
    """Evaluate every candidate on the validation seeds (side by side, cached) and keep the best;
    among equal successes the fewest steps."""
    made_by = demo.out / "pretrain"
    found = candidates(demo)
    if len(found) == 1 or not demo.ex.select_every:
        steps, policy = next(iter(found.items()))
        return BestOffline(steps, policy, made_by, {})
    inputs = ((str(made_by), run_id(made_by)),)
    jobs = {
        steps: _validation_job(
            demo,
            policy,
            validation_dir(demo, steps),
            f"validate the policy after {steps} pretraining steps",
            inputs,
        )
        for steps, policy in found.items()
    }
    rates, best = _validate(demo, jobs, "pretraining steps")
    demo.console.print(f"the fine-tunes and the offline control start from the policy after {best} steps")
    return BestOffline(best, found[best], made_by, rates)


def control_snapshots(cfg: RobotRLConfig) -> int:
    """The offline control's snapshots after group 0: every ``learner.snapshot_every_groups``
    groups and the last."""
    every = cfg.learner.snapshot_every_groups
    return -(-cfg.experiment.update_groups // every) if every else 0


def best_with_control(demo: Demo, start: BestOffline) -> BestOffline:
    """Once the offline control has run from ``start``: its snapshots after group 0 (``start``
    itself) validated on ``start``'s seeds, side by side and cached, and the best of them all;
    among equal successes the pretraining snapshot, then the fewest groups. ``start`` as it is
    when there is no control or nothing was validated (``experiment.select_every=0``)."""
    run_dir = demo.finetune_dir(CONTROL)
    snapshots = [s for s in read_policy_snapshots(run_dir) if s.group > 0]
    if not demo.ex.offline_control or not start.validation or not snapshots:
        return start
    jobs: dict[int, Job] = {}
    for snapshot in snapshots:
        out = demo.out / "validate" / f"control-group-{snapshot.group:06d}"
        title = f"validate the offline control at group {snapshot.group}"
        job = _validation_job(demo, out / "policy", out, title, snapshot_identity(run_dir, snapshot))
        if not is_cached(out, step_key(job.argv, dict(job.inputs))):
            weights = run_folder.snapshot_weights_path(run_dir, snapshot.group)
            export_snapshot(start.policy, weights, out / "policy")
        jobs[snapshot.group] = job
    rates, group = _validate(demo, jobs, "the offline control's update group")
    if rates[group] <= start.validation[start.steps]:
        demo.console.print(
            f"the best offline policy is the starting point ({start.validation[start.steps]:.0%})"
        )
        return replace(start, control_validation=rates)
    demo.console.print(f"the best offline policy is the offline control's after {group} groups")
    policy = jobs[group].out_dir / "policy"
    return replace(start, policy=policy, made_by=run_dir, control_groups=group, control_validation=rates)


def _validation_job(
    demo: Demo, policy: Path, out: Path, title: str, inputs: tuple[tuple[str, str | None], ...]
) -> Job:
    """A `robotrl eval` of ``policy`` on the validation seeds, in the target, into ``out``."""
    ex = demo.ex
    cfg = demo.evaluation_config(policy, ex.validation_episodes, ex.validation_seed)
    argv = robotrl("eval", *config_overrides(cfg, ["env", "policy", "actor"]), f"run_dir={out}")
    whole = functools.partial(ran_every_episode, episodes=ex.validation_episodes)
    return Job(f"{title} on {ex.validation_episodes} seeds", out, tuple(argv), inputs, complete=whole)


def _validate(demo: Demo, jobs: dict[int, Job], by: str) -> tuple[dict[int, float], int]:
    """Run ``jobs`` side by side (cached) and print their success on the validation seeds; each
    one's success by key, and the key of the best (the smallest among equals)."""
    demo.side_by_side(list(jobs.values()), "validations", "")
    rates = {key: run_folder.read_eval_summary(job.out_dir)["success_rate"] for key, job in jobs.items()}
    demo.console.print(f"validation success by {by}: " + ", ".join(f"{k}: {r:.0%}" for k, r in rates.items()))
    return rates, max(rates, key=lambda key: (rates[key], -key))


def offline_control_job(demo: Demo, best: BestOffline) -> Job:
    """The offline control's `robotrl learner learner.offline=true` run, from the starting point
    ``best``, with the fine-tunes' budget of update groups."""
    out = demo.finetune_dir(CONTROL)
    cfg = demo.target_config(
        env__takeover=TakeoverConfig(),
        policy__path=str(best.policy),
        learner__algorithm=AlgorithmKind.bc,
        learner__offline=True,
        learner__max_groups=demo.ex.update_groups,
        learner__demos_path=str(demo.demos),
        learner__resume=False,  # exactly max_groups groups from the best offline policy
        # one thread, as `robotrl launch` gives the fine-tunes' learners beside it
        learner__torch_threads=demo.cfg.launch.learner_threads,
    )
    argv = robotrl(
        "learner",
        *config_overrides(cfg, ["env", "policy", "learner"]),
        f"run_dir={out}",
        f"seed={demo.cfg.seed}",
    )
    updates = demo.ex.update_groups * demo.cfg.learner.actor_updates_per_group
    title = f"offline control: {updates} BC updates on the demonstrations alone from the best offline policy"
    inputs = ((str(best.made_by), run_id(best.made_by)), (str(demo.demos), run_id(demo.demos)))
    complete = functools.partial(trained_groups, demo.ex.update_groups)
    if not is_cached(out, step_key(argv, dict(inputs))):
        shutil.rmtree(out, ignore_errors=True)  # a half-finished control, or one of other settings
    return Job(title, out, tuple(argv), inputs, complete=complete)


def trained_groups(groups: int, run_dir: Path) -> bool:
    """Whether the learner in ``run_dir`` checkpointed after exactly ``groups`` update groups."""
    latest = run_folder.latest_checkpoint(run_dir)
    return latest is not None and run_folder.checkpoint_groups(latest) == groups
