"""`robotrl pretrain policy=lerobot`: a tiny SmolVLA made by `robotrl vla init` trains on a recorded
LeRobotDataset (camera videos, joints, the task's instruction; no cube pose) through lerobot's own
processors and ``forward``, and the folder it writes runs in `robotrl eval` after being moved."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from robotrl.cli import main
from robotrl.core.run_folder import PRETRAIN_METRICS
from robotrl.policy.data import load_demos
from robotrl.policy.lerobot import LerobotChunkPolicy
from robotrl.policy.vla import VLM_FOLDER

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ENV = [
    "env.cameras=[front,wrist]",
    "env.image_size=32",
    "env.privileged_state=false",
    "env.max_episode_ticks=60",
]
HORIZON = ["policy.horizon=16", "policy.max_delay=8"]
POLICY = ["policy=lerobot", *HORIZON]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_tiny_smolvla_pretrains_on_recorded_videos_and_the_moved_result_evaluates(tmp_path):
    demos = tmp_path / "demos"
    record = ["record", *ENV, "policy=expert", "record.episodes=4", "record.video=true"]
    assert main([*record, f"record.output_dir={demos}"]) == 0
    vla = tmp_path / "vla"
    assert main(["vla", "init", "--size", "tiny", "--out", str(vla), *ENV, *HORIZON]) == 0
    run = tmp_path / "pretrain"
    args = [
        "pretrain",
        *ENV,
        *POLICY,
        f"policy.path={vla}",
        f"dataset={demos}",
        f"run_dir={run}",
        "pretrain.steps=240",
        "pretrain.batch_size=8",
        "pretrain.lr=1e-3",
        "pretrain.warmup_steps=0",
        "pretrain.val_every=80",
        "pretrain.val_fraction=0",
        "pretrain.val_batches=2",
    ]
    assert main(args) == 0
    losses = [json.loads(line)["val_loss"] for line in (run / PRETRAIN_METRICS).read_text().splitlines()]
    assert len(losses) == 3 and losses[-1] < 0.8 * losses[0], losses

    moved = tmp_path / "moved"
    shutil.move(run / "policy", moved)
    assert (moved / VLM_FOLDER / "config.json").is_file()
    trained = LerobotChunkPolicy.load(moved)
    data = load_demos(demos)
    frames = data.frames_of(range(len(data.episode_bounds)))
    stats = trained.normalization()
    np.testing.assert_allclose(stats["action_mean"], data.action[frames].mean(0), rtol=1e-5)
    evaluation = [
        "eval",
        *ENV,
        *POLICY,
        f"policy.path={moved}",
        "actor.episodes=1",
        f"run_dir={tmp_path / 'eval'}",
    ]
    assert main(evaluation) == 0
    assert json.loads((tmp_path / "eval" / "eval_summary.json").read_text())["episodes"] == 1

    # LoRA on the pretrained policy: a plain folder comes out (adapters merged), and a second run
    # in the same run_dir is refused rather than resumed from merged weights.
    lora = [a for a in args if not a.startswith(("policy.path=", "run_dir=", "pretrain.steps="))]
    lora += [
        f"policy.path={moved}",
        f"run_dir={tmp_path / 'lora'}",
        "policy.lora_rank=4",
        "pretrain.steps=20",
    ]
    assert main(lora) == 0
    merged = LerobotChunkPolicy.load(tmp_path / "lora" / "policy")
    assert not any(".lora_" in name for name in merged.trainable_tensors())
    assert main([*lora, "pretrain.steps=40"]) == 2
