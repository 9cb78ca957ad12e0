"""A policy trained by lerobot's own `lerobot-train` on a dataset `robotrl record` wrote: its
checkpoint runs in `robotrl eval` and fine-tunes in `robotrl learner` beside `robotrl actor`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from learner_process import learner_running, run_actor

from robotrl.cli import main

ENV = ["env.cameras=[front]", "env.image_size=32", "env.privileged_state=false", "env.max_episode_ticks=60"]
LEROBOT_TRAIN = str(Path(sys.executable).parent / "lerobot-train")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_lerobot_train_checkpoint_evaluates_and_fine_tunes(tmp_path):
    demos = tmp_path / "demos"
    assert main(["record", *ENV, "policy=expert", "record.episodes=3", f"record.output_dir={demos}"]) == 0
    act = [  # a small ACT, no pretrained backbone: nothing downloaded
        "--policy.type=act",
        "--policy.pretrained_backbone_weights=null",
        "--policy.dim_model=64",
        "--policy.n_heads=2",
        "--policy.dim_feedforward=128",
        "--policy.n_encoder_layers=1",
        "--policy.n_decoder_layers=1",
        "--policy.chunk_size=16",
        "--policy.n_action_steps=16",
        "--policy.device=cpu",
        "--policy.push_to_hub=false",
    ]
    trained = subprocess.run(
        [
            LEROBOT_TRAIN,
            "--dataset.repo_id=local/demos",
            f"--dataset.root={demos}",
            *act,
            "--batch_size=4",
            "--steps=4",
            "--save_freq=4",
            "--num_workers=0",
            f"--output_dir={tmp_path / 'train'}",
            "--wandb.enable=false",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    checkpoint = tmp_path / "train" / "checkpoints" / "last"
    assert (checkpoint / "pretrained_model" / "config.json").is_file()

    policy = ["policy=lerobot", f"policy.path={checkpoint}", "policy.horizon=16", "policy.max_delay=8"]
    assert main(["eval", *ENV, *policy, "actor.episodes=1", f"run_dir={tmp_path / 'eval'}"]) == 0
    assert json.loads((tmp_path / "eval" / "eval_summary.json").read_text())["episodes"] == 1

    shared = [
        *policy,
        *ENV,
        f"transport.transitions_endpoint=ipc://{tmp_path}/t.sock",
        f"transport.weights_endpoint=ipc://{tmp_path}/w.sock",
        f"transport.spool_dir={tmp_path}/spool",
    ]
    with learner_running(tmp_path, shared, "learner.algorithm=bc") as learner:
        run_actor(tmp_path, shared, "actor.episodes=3", "actor.versions_per_episode=2")
    assert learner.process.returncode == 0, learner.output[-3000:]
    progress = json.loads((tmp_path / "actor" / "actor_actor-0_progress.json").read_text())
    assert progress["history"][-1][1] >= 4, progress  # the actor ran the learner's updates
