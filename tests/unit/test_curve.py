"""The learning curve: its seed block stays apart from the final evaluation's, its evaluations
score the policy alone, and its plot draws the snapshots beside the offline baselines."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from robotrl.config.experiment import demo_seed_problems
from robotrl.config.load import ConfigError, load_config
from robotrl.core import run_folder
from robotrl.core.policy_snapshots import PolicySnapshot
from robotrl.core.run_folder import ActorProgress
from robotrl.experiment.curve import CurvePoint, curve_eval_config, online_episodes_before
from robotrl.experiment.plots import learning_curves


def test_the_curve_seeds_may_not_overlap_the_final_evaluation_or_the_online_seeds():
    assert not demo_seed_problems(load_config(["experiment=demo", "experiment.repeats=3"]))
    # the demo evaluates on 1000000-1000199: a curve from 1000150 would score on 50 of them
    clash = load_config(["experiment=demo", "experiment.curve_seed=1000150"])
    assert [key for key, _ in demo_seed_problems(clash)] == ["experiment.curve_seed"]
    why = demo_seed_problems(clash)[0][1]
    assert "curve's seeds 1000150-1000169 overlap the final evaluation seeds 1000000-1000199" in why
    # ... and just below them, touching the first one
    edge = load_config(["experiment=demo", "experiment.curve_seed=999981"])
    assert [key for key, _ in demo_seed_problems(edge)] == ["experiment.curve_seed"]
    beside = load_config(["experiment=demo", "experiment.curve_seed=999980"])
    assert not demo_seed_problems(beside)
    online = load_config(["experiment=demo", "experiment.curve_seed=290"])  # the online seeds are 0-299
    assert "overlap the fine-tuning runs' online seeds 0-299" in demo_seed_problems(online)[0][1]


def test_bad_snapshot_and_curve_settings_are_config_errors_naming_their_key():
    with pytest.raises(ConfigError, match=r"learner\.snapshot_every_groups"):
        load_config(["learner.snapshot_every_groups=-1"])
    with pytest.raises(ConfigError, match=r"experiment\.curve_episodes"):
        load_config(["experiment.curve_episodes=0"])


def test_a_curve_evaluation_scores_the_policy_alone_on_the_curve_seeds(tmp_path: Path):
    cfg = load_config(["experiment=demo", "env.takeover.on_miss=true", "policy.noise_scale=0.8"])
    evaluation = curve_eval_config(cfg, tmp_path / "policy")
    assert (evaluation.actor.seed, evaluation.actor.episodes) == (3_000_000, 20)
    assert evaluation.policy.noise_scale == cfg.experiment.eval_noise_scale == 0.0
    assert not evaluation.env.takeover.on_miss and evaluation.policy.path == str(tmp_path / "policy")
    assert cfg.env.takeover.on_miss and cfg.actor.seed == 0  # the run's own config is left as it was


def test_a_snapshot_counts_the_episodes_ended_before_its_policy_ran(tmp_path: Path):
    # two actors; each history entry: [success, newest policy version executed]
    run_folder.write_actor_progress(tmp_path, "actor-0", ActorProgress(history=[[1, 0], [0, 2], [1, 5]]))
    run_folder.write_actor_progress(tmp_path, "actor-1", ActorProgress(history=[[0, 0], [1, 4]]))

    def at(version: int) -> int:
        return online_episodes_before(tmp_path, PolicySnapshot(0, version, 0, 0.0, 0.0))

    assert [at(v) for v in (0, 1, 3, 5, 6)] == [0, 2, 3, 4, 5]


def test_the_learning_curve_draws_snapshots_and_baselines(tmp_path: Path):
    run = tmp_path / "finetune_rapi"
    run.mkdir()
    (run / "actor_actor-0_progress.json").write_text(json.dumps({"history": [[i % 2, i] for i in range(12)]}))
    points = [CurvePoint(0, 0, 5.0, 0.3, (0.15, 0.5)), CurvePoint(6, 6, 65.0, 0.7, (0.5, 0.85))]
    baselines = {"best offline": (0.55, [0.48, 0.62]), "offline control": (0.6, [0.53, 0.67])}
    evals = {"rapi": {"success_rate": 0.8, "ci95": [0.7, 0.9]}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with_lines = learning_curves({"rapi": run}, evals, tmp_path / "a.png", {"rapi": points}, baselines)
        without = learning_curves({"rapi": run}, evals, tmp_path / "b.png", {"rapi": points})
    assert with_lines.read_bytes()[:4] == b"\x89PNG" and with_lines.read_bytes() != without.read_bytes()
