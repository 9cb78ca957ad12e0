"""The demo's baselines and its deployment shift: which condition each step runs in, the
offline control's budget, and how the best offline policy is chosen."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from demo_steps import offline_step_argvs
from rich.console import Console

from robotrl.actor.report import wilson_interval
from robotrl.config.learner import AlgorithmKind
from robotrl.config.load import load_config
from robotrl.core import run_folder
from robotrl.core.policy_snapshots import PolicySnapshot, pretrain_snapshot, write_policy_snapshot
from robotrl.experiment.baselines import (
    CONTROL,
    BestOffline,
    best_with_control,
    choose_best_offline,
    control_snapshots,
    offline_control_job,
)
from robotrl.experiment.demo import Demo

TARGET = [0.55, 0.85]


def demo_of(tmp_path: Path, *overrides: str) -> Demo:
    cfg = load_config(["experiment=demo", f"experiment.output_dir={tmp_path}", *overrides])
    return Demo(cfg, Console(file=open("/dev/null", "w")))


def scene_of(argv: list[str] | tuple[str, ...]) -> list[float]:
    cfg = load_config(list(argv[4:]))
    return list(cfg.env.scene.cube_azimuth)


def test_demonstrations_see_the_source_condition_and_everything_else_the_target(tmp_path, monkeypatch):
    demo = demo_of(tmp_path, f"experiment.shift.cube_azimuth=[{TARGET[0]},{TARGET[1]}]")
    source = list(demo.cfg.env.scene.cube_azimuth)
    assert source != TARGET
    record, pretrain, evaluate = offline_step_argvs(demo, tmp_path, monkeypatch)
    assert scene_of(record) == scene_of(pretrain) == source
    assert scene_of(evaluate) == TARGET
    for name in ("rapi", "bc", "bc_demos", "rapi_no_takeover"):
        assert list(demo.finetune_config(name).env.scene.cube_azimuth) == TARGET, name
    assert scene_of(offline_control_job(demo, demo.best).argv) == TARGET
    curve_configs = []

    def fake_curve_jobs(cfg, run_dir, pretrained):
        curve_configs.append(cfg)
        return []

    monkeypatch.setattr("robotrl.experiment.curve.curve_jobs", fake_curve_jobs)
    demo.learning_curve({})
    assert curve_configs and all(list(c.env.scene.cube_azimuth) == TARGET for c in curve_configs)
    assert all(c.actor.seed == demo.ex.curve_seed for c in curve_configs)


def test_a_null_shift_runs_everything_in_the_source_condition(tmp_path):
    demo = demo_of(tmp_path, "experiment.shift=null")
    assert demo.ex.shift is None and demo.target_scene == demo.cfg.env.scene
    assert demo.finetune_config("rapi").env.scene == demo.cfg.env.scene


def test_the_offline_control_runs_a_fine_tunes_updates_on_demonstrations_alone(tmp_path):
    demo = demo_of(tmp_path, "experiment.update_groups=7")
    job = offline_control_job(demo, demo.best)
    cfg = load_config(list(job.argv[4:]))
    assert job.argv[3] == "learner" and cfg.learner.offline
    assert cfg.learner.algorithm is AlgorithmKind.bc and cfg.learner.max_groups == 7
    rapi = demo.finetune_config("rapi")
    assert cfg.learner.actor_updates_per_group == rapi.learner.actor_updates_per_group
    assert cfg.learner.policy_lr == rapi.learner.policy_lr
    assert cfg.learner.batch_size == rapi.learner.batch_size
    assert cfg.learner.demos_path == rapi.learner.demos_path == str(demo.demos)
    assert cfg.policy.path == rapi.policy.path == str(demo.start.policy)  # both start from the same point
    assert not cfg.env.takeover.enabled
    assert rapi.env.takeover.enabled and not demo.finetune_config("rapi_no_takeover").env.takeover.enabled


def _kept(demo: Demo, steps: list[int]) -> None:
    for step in steps:
        pretrain_snapshot(demo.out / "pretrain", step).mkdir(parents=True)


def test_the_best_offline_policy_is_the_most_successful_on_validation_seeds_fewest_steps_first(
    tmp_path, monkeypatch
):
    demo = demo_of(tmp_path, "experiment.pretrain_steps=12000", "experiment.select_every=3000")
    _kept(demo, [1000, 3000, 6000, 9000, 12000, 15000])  # 1000 and 15000: another pretraining's
    wins = {3000: 20, 6000: 31, 9000: 31, 12000: 29}
    validated: list[list[str]] = []

    def fake_side_by_side(jobs, what, progress):
        for job in jobs:
            cfg = load_config(list(job.argv[4:]))
            validated.append([cfg.policy.path, cfg.actor.seed, cfg.actor.episodes])
            assert list(cfg.env.scene.cube_azimuth) == list(demo.target_scene.cube_azimuth)
            step = int(Path(cfg.policy.path).name.removeprefix("step-"))
            lo, hi = wilson_interval(wins[step], 50)
            job.out_dir.mkdir(parents=True)
            summary = {"episodes": 50, "success_rate": wins[step] / 50, "ci95": [lo, hi]}
            (job.out_dir / run_folder.EVAL_SUMMARY).write_text(json.dumps(summary))

    monkeypatch.setattr(demo, "side_by_side", fake_side_by_side)
    best = choose_best_offline(demo)
    assert best.steps == 6000 and best.policy == pretrain_snapshot(demo.out / "pretrain", 6000)
    assert best.validation == {3000: 0.4, 6000: 0.62, 9000: 0.62, 12000: 0.58}
    ex = demo.ex
    assert all(seed == ex.validation_seed and n == ex.validation_episodes for _, seed, n in validated)
    assert not ex.eval_seed <= ex.validation_seed < ex.eval_seed + ex.eval_episodes


def test_without_select_every_the_last_pretrained_policy_is_the_baseline_unvalidated(tmp_path, monkeypatch):
    demo = demo_of(tmp_path, "experiment.select_every=0")
    monkeypatch.setattr(demo, "side_by_side", lambda *a: pytest.fail("nothing to validate"))
    best = choose_best_offline(demo)
    assert (best.steps, best.policy, best.validation) == (demo.ex.pretrain_steps, demo.pretrained, {})


def test_a_shift_names_scene_fields_with_values_they_accept(tmp_path, capsys):
    from robotrl.experiment.main import main as experiment_main

    out = f"experiment.output_dir={tmp_path}"
    bad = load_config(["experiment=demo", out, "+experiment.shift.cube_size=2"])
    assert experiment_main(bad) == 2
    assert "experiment.shift: ['cube_size'] are not env.scene fields" in capsys.readouterr().err
    reversed_range = load_config(
        ["experiment=demo", f"experiment.output_dir={tmp_path}", "experiment.shift.cube_azimuth=[0.8,0.5]"]
    )
    assert experiment_main(reversed_range) == 2
    assert "experiment.shift.cube_azimuth" in capsys.readouterr().err
    reach = load_config(["experiment=demo", out, "env=so101_reach", "env.takeover.on_miss=false"])
    assert experiment_main(reach) == 2
    assert "experiment.shift: only the pick-and-place task reads env.scene" in capsys.readouterr().err


def _validated(demo: Demo, wins: dict[int, int], validated: list[int]):
    """A stand-in for running validations side by side: each job's summary scores ``wins[group]``
    of 50 (the group read from the job's folder)."""

    def fake_side_by_side(jobs, what, progress):
        for job in jobs:
            cfg = load_config(list(job.argv[4:]))
            assert (cfg.actor.seed, cfg.actor.episodes) == (
                demo.ex.validation_seed,
                demo.ex.validation_episodes,
            )
            assert Path(cfg.policy.path) == job.out_dir / "policy"
            group = int(job.out_dir.name.removeprefix("control-group-"))
            validated.append(group)
            lo, hi = wilson_interval(wins[group], 50)
            summary = {"episodes": 50, "success_rate": wins[group] / 50, "ci95": [lo, hi]}
            (job.out_dir / run_folder.EVAL_SUMMARY).write_text(json.dumps(summary))

    return fake_side_by_side


@pytest.mark.parametrize(
    ("wins", "chosen"),
    [({50: 25, 100: 35, 150: 35}, 100), ({50: 25, 100: 31, 150: 20}, 0)],
    ids=["a control snapshot validates better", "none beats the starting point"],
)
def test_the_offline_controls_snapshots_are_candidates_for_the_best_offline_policy(
    tmp_path, monkeypatch, wins, chosen
):
    demo = demo_of(tmp_path, "experiment.update_groups=150", "learner.snapshot_every_groups=50")
    assert control_snapshots(demo.cfg) == 3
    control = demo.finetune_dir(CONTROL)
    for group in (0, 50, 100, 150):
        snapshot = PolicySnapshot(group, group, 0, float(group), 1.7e9 + group)
        write_policy_snapshot(control, snapshot, {"w": np.zeros(2, np.float32)})
    exported: list[Path] = []
    monkeypatch.setattr(
        "robotrl.experiment.baselines.export_snapshot",
        lambda pretrained, weights, target: exported.append(target) or target.mkdir(parents=True),
    )
    validated: list[int] = []
    monkeypatch.setattr(demo, "side_by_side", _validated(demo, wins, validated))
    start = BestOffline(6000, demo.pretrained, demo.out / "pretrain", {3000: 0.4, 6000: 0.62})
    best = best_with_control(demo, start)
    assert validated == [50, 100, 150]  # group 0 is the starting point, validated already
    assert best.control_validation == {group: won / 50 for group, won in wins.items()}
    assert (best.steps, best.validation, best.control_groups) == (6000, start.validation, chosen)
    if chosen:  # the fewest groups among equals; the policy is the snapshot validated
        assert best.policy == demo.out / "validate" / f"control-group-{chosen:06d}" / "policy"
        assert best.policy in exported
        assert best.made_by == control and best.describe(50) == "BC, 6000 steps + 5000 control updates"
    else:
        assert (best.policy, best.made_by, best.describe(50)) == (
            start.policy,
            start.made_by,
            "BC, 6000 steps",
        )


def test_without_validation_or_control_the_starting_point_is_the_best_offline_policy(tmp_path, monkeypatch):
    monkeypatch.setattr(Demo, "side_by_side", lambda *a: pytest.fail("nothing to validate"))
    start = BestOffline(3000, tmp_path / "policy", tmp_path, {})
    demo = demo_of(tmp_path)
    assert best_with_control(demo, start) is start  # unvalidated (select_every=0): nothing to compare with
    validated = BestOffline(3000, tmp_path / "policy", tmp_path, {3000: 0.5})
    assert best_with_control(demo, validated) is validated  # the control left no snapshot
    assert best_with_control(demo_of(tmp_path, "experiment.offline_control=false"), validated) is validated
