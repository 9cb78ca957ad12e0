"""`make demo`'s script end to end at smoke size (DEMO_QUICK=1, shrunk further), twice: the
second run reuses every artefact. The numbers of such a small run mean nothing; the test
checks that every step runs through real processes and leaves what the user is told about."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SMOKE = [
    "experiment.demos=3",
    "experiment.pretrain_steps=60",
    "experiment.select_every=30",  # two candidate budgets, validated
    "experiment.validation_episodes=2",
    "experiment.eval_episodes=3",
    "experiment.online_episodes=2",
    "experiment.update_groups=3",
    "experiment.rerun_episodes=1",
    "experiment.algorithms=[rapi,bc,bc_demos]",  # the preset runs the first two: test three
    "env.max_episode_ticks=120",
    "pretrain.val_every=30",
    "pretrain.checkpoint_every=30",
]


def _demo(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    args = [f"experiment.output_dir={out}", *SMOKE, *extra]
    env = {**os.environ, "DEMO_QUICK": "1", "DEMO_ARGS": " ".join(args)}
    return subprocess.run(
        ["bash", "launch/demo.sh"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_quick_demo_runs_every_step_and_a_second_run_reuses_them(tmp_path: Path):
    out = tmp_path / "demo"
    first = _demo(out)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    for key in ("success", "ci95", "best_offline_steps", "validation_success", "episodes", "wall_s"):
        assert key in results
    assert results["episodes"] == 3
    policies = ("best_offline", "offline_control", "rapi", "bc", "bc_demos")
    assert list(results["success"]) == list(policies)
    assert all(0.0 <= rate <= 1.0 for rate in results["success"].values())
    assert list(results["validation_success"]) == ["30", "60"] and results["best_offline_steps"] in (30, 60)
    # the control's last snapshot (group 3) is a candidate too, validated on the same seeds
    assert list(results["control_validation_success"]) == ["3"]
    assert results["best_offline_control_groups"] in (0, 3)
    # the demonstrations carry the source condition; everything after them ran in the target
    from robotrl.data.lerobot_dataset import RecordedDataset

    scene = RecordedDataset(out / "demos").scene
    assert scene is not None and scene == results["setting"]["source_scene"]
    assert results["setting"]["target_scene"]["cube_azimuth"] == results["shift"]["cube_azimuth"]
    assert scene["cube_azimuth"] != results["shift"]["cube_azimuth"]
    assert "learning-curve evaluations: 2 at a time" in first.stdout
    # the control made exactly a fine-tune's budget of updates: 3 groups of the preset's 50
    assert results["actor_updates"]["offline_control"] == [3 * 50]
    for name, figures in results["per_policy"].items():  # every eval says how its episodes ended
        assert sum(figures["outcomes"].values()) == 3, name
    assert "how the failed episodes ended:" in first.stdout
    assert "fine-tuning runs: 2 at a time" in first.stdout and "evaluations: 2 at a time" in first.stdout
    assert (out / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "demo.rrd").stat().st_size > 0
    for algorithm in ("rapi", "bc", "bc_demos"):
        run = out / f"finetune_{algorithm}"
        assert (run / "policy").is_dir() and (run / "logs" / "learner.log").exists()
        progress = json.loads((run / "actor_actor-0_progress.json").read_text())
        assert progress["episodes"] == 2

    # the preset fine-tunes side by side; one by one, the same runs are the same steps
    second = _demo(out, "experiment.finetune_workers=1")
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    # record, pretrain, 3 validations, 5 evals, control, 3 fine-tunings, rerun, 3 runs x 2 curve points
    assert second.stdout.count("cached") == 21
    assert json.loads((out / "results.json").read_text())["success"] == results["success"]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_vla_demo_makes_pretrains_and_fine_tunes_a_real_smolvla_from_cameras(tmp_path: Path):
    """`experiment=vla_demo` at smoke size: lerobot's SmolVLA made offline, pretrained on the
    recorded camera videos, chosen, fine-tuned by RAPI and BC beside the offline control, and
    evaluated, all through real processes, with no privileged pose anywhere."""
    out = tmp_path / "vla_demo"
    smoke = [
        "experiment.demos=3",
        "experiment.pretrain_steps=40",
        "experiment.select_every=20",
        "experiment.validation_episodes=2",
        "experiment.eval_episodes=3",
        "experiment.online_episodes=2",
        "experiment.update_groups=3",
        "experiment.rerun_episodes=1",
        "experiment.curve_episodes=2",
        "env.max_episode_ticks=120",
        "pretrain.val_every=20",
        "pretrain.checkpoint_every=20",
        "pretrain.batch_size=8",
        "learner.batch_size=8",
        "learner.learning_starts=16",
    ]
    args = ["-m", "robotrl.cli", "experiment", "experiment=vla_demo", f"experiment.output_dir={out}", *smoke]
    done = subprocess.run(
        [sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=1100, check=False
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    assert list(results["success"]) == ["best_offline", "offline_control", "rapi", "bc"]
    assert results["episodes"] == 3 and results["best_offline_steps"] in (20, 40)
    assert json.loads((out / "vla" / "config.json").read_text())["type"] == "smolvla"
    for run in ("finetune_rapi", "finetune_bc"):
        assert json.loads((out / run / "actor_actor-0_progress.json").read_text())["episodes"] == 2
    assert "make a tiny smolvla offline" in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_pixel_demo_learns_from_two_cameras_and_the_joints_with_no_cube_pose(tmp_path: Path):
    """`experiment=demo_pixels` at smoke size through real processes: demonstrations recorded
    with two cameras, the flow policy pretrained on their videos (its training loss falls; with two
    training episodes the one validation episode's loss says nothing yet) and
    fine-tuned under takeovers the sim's hidden cube pose drives; no cube column reaches it."""
    out = tmp_path / "demo_pixels"
    smoke = [
        *(s for s in SMOKE if not s.startswith(("experiment.algorithms", "experiment.pretrain_steps"))),
        "experiment.pretrain_steps=90",
        "experiment.curve_episodes=2",
        "pretrain.warmup_steps=10",
        "pretrain.batch_size=16",
        "learner.batch_size=16",
        "learner.learning_starts=16",
    ]
    args = [
        "-m",
        "robotrl.cli",
        "experiment",
        "experiment=demo_pixels",
        f"experiment.output_dir={out}",
        *smoke,
    ]
    done = subprocess.run(
        [sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=1100, check=False
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    assert list(results["success"]) == ["best_offline", "offline_control", "rapi", "bc"]
    assert (
        results["sim_steps_per_s"]["cameras"] == ["front", "wrist"] and results["sim_steps_per_s"]["env"] > 0
    )
    spec = json.loads((out / "pretrain" / "policy" / "robotrl_policy.json").read_text())["spec"]
    assert set(spec["camera_shapes"]) == {"front", "wrist"}
    assert not [n for n in spec["state_names"] if n.startswith("cube.")]
    loss = [json.loads(line)["loss"] for line in (out / "pretrain" / "pretrain_metrics.jsonl").open()]
    assert len(loss) == 3 and loss[-1] < 0.8 * loss[0], loss
    for run in ("finetune_rapi", "finetune_bc"):
        assert json.loads((out / run / "actor_actor-0_progress.json").read_text())["episodes"] == 2
