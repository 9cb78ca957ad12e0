"""`robotrl learner` and `robotrl actor` as separate processes: every transition reaches the learner.

Weights reaching actors are tested through `robotrl launch` (test_e2e_launch.py)."""

from __future__ import annotations

import json

import pytest
from learner_process import learner_running, run_actor, shared_overrides

from robotrl.learner.checkpoint import Checkpointer


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_actor_streams_every_transition_to_the_learner(tmp_path):
    shared = shared_overrides(tmp_path, max_episode_ticks=90)
    with learner_running(tmp_path, shared) as learner:
        summary = run_actor(tmp_path, shared, "actor.episodes=6")
    out = learner.output
    transport = summary["transport"]
    assert transport["flushed"] and transport["dropped"] == 0 and transport["refused_transitions"] == 0
    assert transport["acked"] == transport["queued"] > 0
    assert learner.process.returncode == 0, out[-3000:]
    metrics = (tmp_path / "learner" / "learner_metrics.jsonl").read_text().splitlines()
    assert metrics, out[-3000:]
    # Every acknowledged batch was ingested; the learner's checkpoint at exit counts them all
    # (its last metrics line may precede the last batches).
    final = Checkpointer(tmp_path / "learner").latest()
    assert final is not None, out[-3000:]
    # (An episode ends early when a policy version the learner published happens to succeed.)
    assert json.loads((final / "counters.json").read_text())["transitions"] == summary["ticks"]
    assert 0 < summary["ticks"] <= 6 * 90
