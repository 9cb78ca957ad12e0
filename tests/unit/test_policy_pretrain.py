"""`robotrl pretrain`: behaviour cloning from a real local LeRobotDataset, checkpoints, resume."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from policy_datasets import ACTION_DIM, CAMERAS, STATE_DIM, make_dataset

from robotrl.cli import main as cli_main
from robotrl.config.load import load_config
from robotrl.core.policy_snapshots import pretrain_snapshots
from robotrl.core.types import Observation
from robotrl.policy import load_policy
from robotrl.policy.data import load_demos, split_episodes
from robotrl.policy.flow import FlowChunkPolicy
from robotrl.policy.pretrain import Pretrainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("demos") / "ds")


def overrides(dataset, run_dir, steps):
    return [
        f"dataset={dataset}",
        "policy=flow_tiny",
        "policy.horizon=8",
        "policy.max_delay=3",
        "policy.device=cpu",
        f"run_dir={run_dir}",
        f"pretrain.steps={steps}",
        "pretrain.batch_size=8",
        "pretrain.val_every=5",
        "pretrain.val_batches=2",
        "pretrain.checkpoint_every=10",
        "pretrain.warmup_steps=2",
        "pretrain.lr=1e-3",
        "pretrain.val_fraction=0.34",
    ]


def test_demos_read_every_frame_with_episode_bounds_and_spec(dataset):
    demos = load_demos(dataset, CAMERAS)
    assert demos.episode_bounds == [(0, 24), (24, 48), (48, 72)]
    assert demos.images["front"].shape == (72, 32, 32, 3) and demos.images["front"].dtype == np.uint8
    assert demos.spec.action_dim == ACTION_DIM and demos.spec.camera_shapes["wrist"] == (32, 32, 3)
    assert demos.tasks[0] == "pick up the cube"
    assert split_episodes(3, 0.34) == ([0, 1], [2])


def test_missing_camera_in_dataset_is_named(dataset):
    from robotrl.data.lerobot_dataset import DatasetError

    with pytest.raises(DatasetError, match="top"):
        load_demos(dataset, ["front", "top"])


def test_pretrain_role_writes_a_loadable_checkpoint_with_dataset_statistics(dataset, tmp_path):
    run = tmp_path / "run"
    assert cli_main(["pretrain", *overrides(dataset, run, 20)]) == 0
    policy = load_policy(run / "policy")
    assert isinstance(policy, FlowChunkPolicy)
    demos = load_demos(dataset, CAMERAS)
    train_frames = demos.frames_of([0, 1])
    np.testing.assert_allclose(
        policy.normalization()["action_mean"], demos.action[train_frames].mean(0), rtol=1e-5
    )
    assert (run / "policy_best" / "model.safetensors").is_file()
    records = [json.loads(line) for line in (run / "pretrain_metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [5, 10, 15, 20]
    assert all(np.isfinite(r["val_loss"]) for r in records)
    obs = Observation(0, demos.state[0], {c: demos.images[c][0] for c in CAMERAS}, demos.tasks[0])
    prefix = demos.action[:2]
    chunk = policy.infer(obs, prefix, 2)
    assert chunk.shape == (8, ACTION_DIM) and np.array_equal(chunk[:2], prefix)


@pytest.mark.parametrize("privileged", [False, True])
def test_the_cube_pose_reaches_a_pretrained_policy_only_with_privileged_state(tmp_path, privileged):
    names = [f"s{i}" for i in range(STATE_DIM - 3)] + ["cube.x", "cube.y", "cube.z"]
    data = make_dataset(tmp_path / "ds", episodes=2, state_names=names)
    run = tmp_path / "run"
    args = [*overrides(data, run, 2), f"env.privileged_state={str(privileged).lower()}"]
    assert cli_main(["pretrain", *args]) == 0
    policy = load_policy(run / "policy")
    expected = names if privileged else names[:-3]
    assert list(policy.spec.state_names) == expected and policy.spec.state_dim == len(expected)


def test_keep_every_keeps_the_policy_of_each_multiple_as_it_was_then(dataset, tmp_path):
    run = tmp_path / "run"
    assert cli_main(["pretrain", *overrides(dataset, run, 12), "pretrain.keep_every=4"]) == 0
    kept = pretrain_snapshots(run)
    assert list(kept) == [4, 8, 12]  # 4 and 8 fall between checkpoints (every 10): kept anyway
    final = load_policy(run / "policy").state_dict()
    for step, folder in kept.items():
        weights = load_policy(folder).state_dict().values()
        same = all(torch.equal(a, b) for a, b in zip(weights, final.values(), strict=True))
        assert same == (step == 12), step  # each is its step's policy, not the last one


@pytest.mark.slow
def test_resumed_pretraining_matches_an_uninterrupted_run(dataset, tmp_path):
    demos = load_demos(dataset, CAMERAS)
    straight = Pretrainer(load_config(overrides(dataset, tmp_path / "a", 20)), demos)
    straight.run()
    interrupted = Pretrainer(load_config(overrides(dataset, tmp_path / "b", 20)), demos)
    for _ in range(10):
        interrupted.train_step()
    interrupted.save(interrupted.validation_loss())  # what a checkpoint at step 10 leaves behind
    resumed = Pretrainer(load_config(overrides(dataset, tmp_path / "b", 20)), demos)
    resumed.run()
    assert resumed.step == 20
    for (name, a), b in zip(
        straight.policy.state_dict().items(), resumed.policy.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(a, b, msg=name)


def test_with_a_weight_average_the_checkpoint_is_the_average_and_a_resume_matches(dataset, tmp_path):
    demos = load_demos(dataset, CAMERAS)
    ema = ["pretrain.ema=0.9"]
    straight = Pretrainer(load_config(overrides(dataset, tmp_path / "a", 20) + ema), demos)
    straight.run()
    saved = FlowChunkPolicy.load(tmp_path / "a" / "policy")
    params = dict(straight.policy.named_parameters())
    assert straight.average is not None
    for (name, value), avg in zip(saved.named_parameters(), straight.average, strict=True):
        torch.testing.assert_close(value, avg, msg=name)  # the checkpoint is the average ...
    assert any(not torch.equal(p, avg) for p, avg in zip(params.values(), straight.average, strict=True))
    # ... and a run interrupted at a checkpoint resumes both the iterate and the average
    interrupted = Pretrainer(load_config(overrides(dataset, tmp_path / "b", 20) + ema), demos)
    for _ in range(10):
        interrupted.train_step()
    interrupted.save(None)
    resumed = Pretrainer(load_config(overrides(dataset, tmp_path / "b", 20) + ema), demos)
    resumed.run()
    assert resumed.average is not None
    for a, b in zip(straight.policy.parameters(), resumed.policy.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    for a, b in zip(straight.average, resumed.average, strict=True):
        torch.testing.assert_close(a, b)


def test_pretrain_without_dataset_names_the_field(tmp_path, capsys):
    assert cli_main(["pretrain", "policy=flow_tiny", f"run_dir={tmp_path}"]) == 2
    assert "dataset" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("pretrain.steps=0", "pretrain.steps"),
        ("pretrain.val_fraction=1.0", "pretrain.val_fraction"),
        ("pretrain.lr=-1", "pretrain.lr"),
        ("pretrain.ema=1.0", "pretrain.ema"),
        ("dataset=''", "dataset"),
    ],
)
def test_bad_pretrain_config_names_the_field(override, field):
    from robotrl.config.load import ConfigError

    with pytest.raises(ConfigError, match=field):
        load_config([override])


def test_pretraining_warns_when_the_configured_latency_needs_a_longer_prefix_than_max_delay():
    from robotrl.policy.pretrain import delay_beyond_training

    assert delay_beyond_training(load_config(["policy=flow_tiny"])) is None  # 150 ms: 7 ticks <= 12
    # lognormal 0.35 s: the 90% quantile is 0.51 s, 16 ticks at 30 Hz
    slow = load_config(["policy=flow_tiny", "actor.latency.median_s=0.35"])
    warning = delay_beyond_training(slow)
    assert warning is not None and "policy.max_delay=12" in warning and "policy.max_delay >= 16" in warning
    assert (
        delay_beyond_training(
            load_config(["policy=flow_tiny", "actor.latency.median_s=0.35", "policy.max_delay=16"])
        )
        is None
    )
