"""A real-arm actor (fake servos, human keys on stdin) and a learner, as separate processes:
the human's intervention reaches the learner's anchor buffer over the transport."""

from __future__ import annotations

import json

import pytest
from learner_process import learner_running, run_actor, shared_overrides


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_intervention_segments_from_a_real_arm_actor_reach_the_anchor_buffer(tmp_path):
    shared = shared_overrides(tmp_path, max_episode_ticks=45)
    # the learner's host has no arm: it takes the arm's spec from the same config
    arm = ["hardware.robot_type=robotrl_fake_so101", f"hardware.calibration_dir={tmp_path}/calibration"]
    with learner_running(tmp_path, shared, *arm) as learner:
        summary = run_actor(
            tmp_path,
            shared,
            "actor=real_arm",
            "actor.episodes=2",
            *arm,
            "hardware.teleop_type=robotrl_fake_so101_leader",
            "+hardware.teleop_options={pose_degrees: 15.0}",
            "hardware.reset_wait=false",
            keys="i",  # the human takes over from the first tick and never gives control back
        )
    out = learner.output
    assert summary["transport"]["flushed"] and summary["ticks"] == 2 * 45, out[-3000:]
    assert summary["intervention_ticks"] == summary["ticks"] == summary["arm"]["interventions"]
    metrics = [
        json.loads(line) for line in (tmp_path / "learner" / "learner_metrics.jsonl").read_text().splitlines()
    ]
    assert metrics, out[-3000:]
    last = metrics[-1]
    assert last["transitions"] == summary["ticks"]
    assert last["interventions_rows_added"] == summary["ticks"], last
