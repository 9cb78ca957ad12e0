"""The learning curve evaluates a run's policy snapshots with real `robotrl eval` processes, on its
own seed block: never on the final evaluation's seeds, and each snapshot once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from robotrl.sim import make_env

from robotrl.config.load import load_config
from robotrl.core import run_folder
from robotrl.core.policy_snapshots import PolicySnapshot, write_policy_snapshot
from robotrl.core.run_folder import ActorProgress
from robotrl.experiment.curve import curve_points, evaluate_snapshots
from robotrl.policy import build_policy, load_policy, save_policy


def _snapshot(run_dir: Path, group: int, version: int, weights: dict, at: float) -> None:
    snapshot = PolicySnapshot(group, version, transitions=10 * group, elapsed_s=10.0 + group, time=at + group)
    write_policy_snapshot(run_dir, snapshot, weights)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_every_snapshot_is_evaluated_once_on_the_curve_seeds_and_placed_by_its_episodes(tmp_path: Path):
    cfg = load_config(
        [
            "policy=flow_tiny",
            "env.cameras=[]",
            "env.max_episode_ticks=30",
            "experiment.curve_episodes=2",
            "experiment.curve_seed=3000000",
            "experiment.eval_seed=1000000",
        ]
    )
    env = make_env(cfg.env)
    try:
        policy = build_policy(cfg.policy, env.spec)
    finally:
        env.close()
    pretrained = tmp_path / "pretrained"
    save_policy(policy, pretrained)
    start = policy.trainable_tensors()
    moved = {k: v + np.asarray(0.01, v.dtype) if v.dtype.kind == "f" else v for k, v in start.items()}
    run = tmp_path / "finetune_rapi"
    _snapshot(run, 0, 0, start, at=1000.0)
    _snapshot(run, 4, 4, moved, at=1000.0)
    # five episodes: the first two ran v0, the third v3, the last two v4 and v5 (the newest executed)
    history = [[1, 0], [0, 0], [1, 3], [1, 4], [0, 5]]
    run_folder.write_actor_progress(run, "actor-0", ActorProgress(episodes=5, history=history))

    points = evaluate_snapshots(cfg, run, pretrained, workers=2)

    # the learner started 10 s before its group-0 snapshot: wall time counts from its start
    assert [(p.group, p.episodes, p.wall_s) for p in points] == [(0, 0, 10.0), (4, 3, 14.0)]
    final = range(cfg.experiment.eval_seed, cfg.experiment.eval_seed + cfg.experiment.eval_episodes)
    for point in points:
        out = run_folder.curve_eval_dir(run, point.group)
        seeds = [e.seed for e in run_folder.read_eval_episodes(out)]
        assert seeds == [3_000_000, 3_000_001] and not set(seeds) & set(final)
        summary = run_folder.read_eval_summary(out)
        assert point.success_rate == summary["success_rate"] and list(point.ci95) == summary["ci95"]
        assert summary["intervention_ticks"] == 0  # no takeover in an evaluation
    exported = load_policy(run_folder.curve_eval_dir(run, 4) / "policy").trainable_tensors()
    for name, tensor in moved.items():
        np.testing.assert_array_equal(exported[name], tensor)

    # A second call evaluates nothing again; a snapshot a new learner run rewrote is evaluated anew.
    def stamps() -> list:
        return [run_folder.read_step_stamp(run_folder.curve_eval_dir(run, group)) for group in (0, 4)]

    before = stamps()
    _snapshot(run, 4, 4, moved, at=2000.0)
    assert [p.group for p in curve_points(run)] == [0]  # the old evaluation is not the new snapshot's
    assert len(evaluate_snapshots(cfg, run, pretrained, workers=1)) == 2
    after = stamps()
    assert after[0] == before[0] and after[1] != before[1]
