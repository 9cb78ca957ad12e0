"""A real VLA through the runtime: `robotrl learner` fine-tunes a tiny SmolVLA or pi0.5 (RAPI or BC) while
`robotrl actor` runs it, and the actor hot-swaps the learner's updates between episodes' inferences."""

from __future__ import annotations

import json

import numpy as np
import pytest
from learner_process import learner_running, run_actor
from robotrl.sim import make_env
from safetensors.numpy import load_file

from robotrl.config.load import load_config
from robotrl.learner.checkpoint import CHECKPOINT_POLICY, Checkpointer
from robotrl.policy.lerobot import LerobotChunkPolicy
from robotrl.policy.vla import MAKERS

ENV = ["env.cameras=[front,wrist]", "env.image_size=32", "env.max_episode_ticks=60"]


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("kind", "algorithm", "lora"), [("smolvla", "rapi", 0), ("smolvla", "bc", 4), ("pi05", "rapi", 0)]
)
def test_learner_fine_tunes_a_tiny_vla_and_the_actor_swaps_in_only_its_trainable_tensors(
    tmp_path, kind, algorithm, lora
):
    env = make_env(load_config(ENV).env)
    vla = MAKERS[kind](tmp_path / kind, "tiny", env.spec, horizon=32)
    env.close()
    cfg = load_config(["policy=lerobot", f"policy.path={vla}", f"policy.lora_rank={lora}", *ENV])
    initial = LerobotChunkPolicy.load(vla, env.spec, cfg.policy)
    trainable = initial.trainable_tensors()
    total = sum(p.numel() for p in initial.policy.parameters())
    shared = [
        "policy=lerobot",
        f"policy.path={vla}",
        f"policy.lora_rank={lora}",
        *ENV,
        f"transport.transitions_endpoint=ipc://{tmp_path}/t.sock",
        f"transport.weights_endpoint=ipc://{tmp_path}/w.sock",
        f"transport.spool_dir={tmp_path}/spool",
    ]
    with learner_running(tmp_path, shared, f"learner.algorithm={algorithm}") as learner:
        summary = run_actor(tmp_path, shared, "actor.episodes=4", "actor.versions_per_episode=2")
    assert learner.process.returncode == 0, learner.output[-3000:]
    progress = json.loads((tmp_path / "actor" / "actor_actor-0_progress.json").read_text())
    versions = [version for _, version in progress["history"]]
    assert versions[0] == 0 and versions[-1] >= 6 and versions == sorted(versions), progress
    assert summary["missed_deadlines"] == 0 and summary["inference_errors"] == 0
    final = Checkpointer(tmp_path / "learner").latest()
    assert final is not None, learner.output[-3000:]
    published = load_file(str(final / CHECKPOINT_POLICY))
    # Only the action expert and what the VLA trains cross the wire: the frozen backbone never does.
    assert set(published) == set(trainable)
    assert sum(t.size for t in published.values()) < 0.6 * total
    moved = [name for name, t in published.items() if not np.array_equal(t, trainable[name])]
    assert len(moved) > len(published) // 2, "the updates should move most trainable tensors"
