"""A real-arm actor (fake servos, human keys on stdin) and a learner, as separate processes:
the human's intervention reaches the learner's anchor buffer over the transport."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROBOTRL = shutil.which("robotrl") or str(Path(sys.executable).parent / "robotrl")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_intervention_segments_from_a_real_arm_actor_reach_the_anchor_buffer(tmp_path):
    common = [
        "policy=flow_tiny",
        "env.cameras=[]",
        "env.max_episode_ticks=45",
        f"transport.transitions_endpoint=ipc://{tmp_path}/t.sock",
        f"transport.weights_endpoint=ipc://{tmp_path}/w.sock",
        f"transport.spool_dir={tmp_path}/spool",
    ]
    learner = subprocess.Popen(
        [
            ROBOTRL,
            "learner",
            *common,
            f"run_dir={tmp_path}/learner",
            "learner.rapi.critic_warmup_updates=10",
            "learner.learning_starts=32",
            "learner.batch_size=32",
            "learner.log_every_groups=1",
            # the learner's host has no arm: it takes the arm's spec from the same config
            "hardware.robot_type=robotrl_fake_so101",
            f"hardware.calibration_dir={tmp_path}/calibration",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        actor = subprocess.run(
            [
                ROBOTRL,
                "actor",
                *common,
                "actor=real_arm",
                "actor.episodes=2",
                f"run_dir={tmp_path}/actor",
                "hardware.robot_type=robotrl_fake_so101",
                "hardware.teleop_type=robotrl_fake_so101_leader",
                "+hardware.teleop_options={pose_degrees: 15.0}",
                f"hardware.calibration_dir={tmp_path}/calibration",
                "hardware.reset_wait=false",
            ],
            input="i",  # the human takes over from the first tick and never gives control back
            capture_output=True,
            text=True,
            timeout=400,
            check=False,
        )
        assert actor.returncode == 0, actor.stderr[-3000:]
    finally:
        learner.terminate()
        out, _ = learner.communicate(timeout=120)
    summary = json.loads((tmp_path / "actor" / "actor_actor-0_summary.json").read_text())
    assert summary["transport"]["flushed"] and summary["ticks"] == 2 * 45, out[-3000:]
    assert summary["intervention_ticks"] == summary["ticks"] == summary["arm"]["interventions"]
    metrics = [
        json.loads(line) for line in (tmp_path / "learner" / "learner_metrics.jsonl").read_text().splitlines()
    ]
    assert metrics, out[-3000:]
    last = metrics[-1]
    assert last["transitions"] == summary["ticks"]
    assert last["interventions_rows_added"] == summary["ticks"], last
