"""`make demo`'s script end to end at smoke size (DEMO_QUICK=1, shrunk further), twice: the
second run reuses every artefact. The numbers of such a small run mean nothing; the test
checks that every step runs through real processes and leaves what the user is told about."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SMOKE = [
    "experiment.demos=3",
    "experiment.pretrain_steps=60",
    "experiment.eval_episodes=3",
    "experiment.online_episodes=2",
    "experiment.update_groups=3",
    "experiment.rerun_episodes=1",
    "experiment.algorithms=[rapi,bc,bc_demos]",  # the preset runs the first two: test all three
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
    for key in (
        "success_before",
        "success_after",
        "success_bc",
        "success_bc_demos",
        "ci95",
        "episodes",
        "wall_s",
    ):
        assert key in results
    assert results["episodes"] == 3
    for name in ("success_before", "success_after", "success_bc", "success_bc_demos"):
        assert 0.0 <= results[name] <= 1.0
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
    assert second.stdout.count("cached") == 10  # record, pretrain, 4 evals, 3 fine-tunings, rerun
    assert json.loads((out / "results.json").read_text())["success_after"] == results["success_after"]
