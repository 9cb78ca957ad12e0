"""The learning curve: each policy snapshot of a fine-tuning run (``learner.snapshot_every_groups``)
evaluated on a small fixed seed block, placed by the online episodes and wall time it took.

The online success of a run is noisy (every episode has its own seed, and the policy explores);
the curve scores every snapshot on the same ``experiment.curve_episodes`` seeds from
``experiment.curve_seed``, a block apart from the final evaluation's (the demo refuses a config
where they overlap), with deterministic chunks (``experiment.eval_noise_scale``) and no takeover,
as the final evaluation scores the fine-tuned policy. Each evaluation is a `robotrl eval` step
in ``<run_dir>/curve/group-<N>`` whose stamp names its snapshot: a second call evaluates only
the snapshots it has not, so it may run while the learner still writes them.

A snapshot's online episodes are the episodes the run's actors had ended before they ran its
policy: every episode whose newest policy version executed (the actors' progress ``history``)
is older than the snapshot's ``policy_version``. Its wall time counts from the start of the
run's first learner process.
"""

from __future__ import annotations

import copy
import functools
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from robotrl.config.env import TakeoverConfig
from robotrl.config.experiment import eval_noise_scale
from robotrl.config.schema import RobotRLConfig
from robotrl.core import run_folder
from robotrl.core.policy_snapshots import PolicySnapshot, read_policy_snapshots
from robotrl.experiment.parallel import Job, JobDone, run_parallel
from robotrl.experiment.steps import config_overrides, is_cached, ran_every_episode, robotrl, step_key

EVAL_GROUPS = ("env", "policy", "actor")


@dataclass(frozen=True)
class CurvePoint:
    """One snapshot's evaluation, where the run was when the learner published it."""

    group: int
    episodes: int
    """Online episodes the actors had ended before they ran the snapshot's policy."""
    wall_s: float
    """Seconds since the run's first learner started."""
    success_rate: float
    ci95: tuple[float, float]


def curve_eval_config(cfg: RobotRLConfig, policy: Path) -> RobotRLConfig:
    """``cfg`` as a learning-curve evaluation of ``policy``: the curve's seeds and episodes,
    the evaluations' inference temperature, no takeover."""
    ex = cfg.experiment
    out = copy.deepcopy(cfg)
    out.env.takeover = TakeoverConfig()
    out.policy.noise_scale = eval_noise_scale(cfg)
    out.policy.path = str(policy)
    out.actor.episodes = ex.curve_episodes
    out.actor.seed = ex.curve_seed
    return out


def export_snapshot(pretrained: Path, weights: Path, target: Path) -> None:
    """A snapshot's tensors on top of the pretrained checkpoint (its architecture and
    normalisation), saved as a policy folder `robotrl eval policy.path=...` loads."""
    from safetensors.numpy import load_file

    from robotrl.policy import load_policy, save_policy

    policy = load_policy(pretrained)
    policy.load_weights(load_file(str(weights)))
    shutil.rmtree(target, ignore_errors=True)
    save_policy(policy, target)


def curve_jobs(cfg: RobotRLConfig, run_dir: Path, pretrained: Path) -> list[Job]:
    """One `robotrl eval` job per snapshot of ``run_dir`` (for :func:`run_parallel`); the policy
    of each job not already done is exported into its folder first."""
    whole = functools.partial(ran_every_episode, episodes=cfg.experiment.curve_episodes)
    jobs = []
    for snapshot in read_policy_snapshots(run_dir):
        out = run_folder.curve_eval_dir(run_dir, snapshot.group)
        weights = run_folder.snapshot_weights_path(run_dir, snapshot.group)
        policy = out / "policy"
        eval_cfg = curve_eval_config(cfg, policy)
        argv = robotrl("eval", *config_overrides(eval_cfg, EVAL_GROUPS), f"run_dir={out}")
        inputs = snapshot_identity(run_dir, snapshot)
        if not is_cached(out, step_key(argv, dict(inputs))):
            export_snapshot(pretrained, weights, policy)
        title = f"learning curve: {run_dir.name} at update group {snapshot.group}"
        jobs.append(Job(title, out, tuple(argv), inputs, complete=whole))
    return jobs


def evaluate_snapshots(
    cfg: RobotRLConfig,
    run_dir: Path,
    pretrained: Path,
    workers: int = 1,
    on_done: Callable[[JobDone], None] | None = None,
) -> list[CurvePoint]:
    """Evaluate every snapshot of the fine-tuning run ``run_dir`` not yet evaluated, ``workers``
    at a time (each a single-threaded process), and return the run's curve. ``cfg``'s env,
    policy and actor groups are the evaluation's, as for the final evaluation; ``pretrained``
    is the policy the run fine-tuned."""
    run_parallel(curve_jobs(cfg, run_dir, pretrained), workers, on_done or (lambda _: None))
    return curve_points(run_dir)


def curve_points(run_dir: Path) -> list[CurvePoint]:
    """The curve of ``run_dir``: a point for each snapshot whose evaluation finished, by group."""
    snapshots = read_policy_snapshots(run_dir)
    if not snapshots:
        return []
    start = min(s.time - s.elapsed_s for s in snapshots)
    points = []
    for snapshot in snapshots:
        out = run_folder.curve_eval_dir(run_dir, snapshot.group)
        stamp = run_folder.read_step_stamp(out)
        if stamp is None or stamp.inputs != dict(snapshot_identity(run_dir, snapshot)):
            continue  # not evaluated yet, or an evaluation of the snapshot a former learner run wrote
        summary = run_folder.read_eval_summary(out)
        low, high = summary["ci95"]
        points.append(
            CurvePoint(
                group=snapshot.group,
                episodes=online_episodes_before(run_dir, snapshot),
                wall_s=round(snapshot.time - start, 1),
                success_rate=summary["success_rate"],
                ci95=(low, high),
            )
        )
    return points


def snapshot_identity(run_dir: Path, snapshot: PolicySnapshot) -> tuple[tuple[str, str | None], ...]:
    """What an evaluation of a snapshot depends on (a step input): its tensors, as of its write (a
    learner run over again rewrites a snapshot of the same group at a later time)."""
    return ((str(run_folder.snapshot_weights_path(run_dir, snapshot.group)), f"{snapshot.time}"),)


def online_episodes_before(run_dir: Path, snapshot: PolicySnapshot) -> int:
    """Episodes of every actor of ``run_dir`` whose newest policy version is older than
    ``snapshot``'s: those the actors had ended before they ran its policy."""
    return sum(
        version < snapshot.policy_version
        for progress in run_folder.every_actor_progress(run_dir)
        for version in progress.versions()
    )
