"""`robotrl learner` and `robotrl actor` as separate processes: every transition reaches the learner.

Weights reaching actors are tested through `robotrl launch` (test_e2e_launch.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from robotrl.learner.checkpoint import Checkpointer

ROBOTRL = shutil.which("robotrl") or str(Path(sys.executable).parent / "robotrl")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_actor_streams_every_transition_to_the_learner(tmp_path):
    common = [
        "policy=flow_tiny",
        "env.cameras=[]",
        "env.max_episode_ticks=90",
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
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        actor = subprocess.run(
            [ROBOTRL, "actor", *common, f"run_dir={tmp_path}/actor", "actor.episodes=6"],
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
    transport = summary["transport"]
    assert transport["flushed"] and transport["dropped"] == 0 and transport["refused_transitions"] == 0
    assert transport["acked"] == transport["queued"] > 0
    assert learner.returncode == 0, out[-3000:]
    metrics = (tmp_path / "learner" / "learner_metrics.jsonl").read_text().splitlines()
    assert metrics, out[-3000:]
    # Every acknowledged batch was ingested; the learner's checkpoint at exit counts them all
    # (its last metrics line may precede the last batches).
    final = Checkpointer(tmp_path / "learner").latest()
    assert final is not None, out[-3000:]
    # (An episode ends early when a policy version the learner published happens to succeed.)
    assert json.loads((final / "counters.json").read_text())["transitions"] == summary["ticks"]
    assert 0 < summary["ticks"] <= 6 * 90
