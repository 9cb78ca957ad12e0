"""`robotrl record` writes a dataset that lerobot's own LeRobotDataset loads, offline."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robotrl.cli import main
from robotrl.config.load import ConfigError, load_config
from robotrl.core import keys


@pytest.mark.slow
def test_recorded_expert_dataset_loads_in_lerobot(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "demos"
    code = main(
        [
            "record",
            "env=so101_pick_place",
            "policy=expert",
            "record.episodes=2",
            f"record.output_dir={out}",
            "record.repo_id=local/test_demos",
            "env.cameras=[front]",
            "env.image_size=32",
            "env.max_episode_ticks=120",
        ]
    )
    assert code == 0
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset("local/test_demos", root=out)
    assert ds.num_episodes == 2
    assert ds.fps == 30
    ends = [ds.meta.episodes[i]["length"] for i in range(2)]
    assert ds.num_frames == sum(ends) == len(ds)
    assert all(10 < n <= 120 for n in ends)
    features = ds.meta.features
    assert features[keys.STATE]["shape"] == (15,)  # joints, velocities, goal; no privileged cube pose
    assert features[keys.ACTION]["names"][-1] == "gripper.pos"
    assert features[keys.IMAGE_PREFIX + "front"]["dtype"] == "image"
    item = ds[ends[0] - 1]  # last frame of the first episode
    assert item[keys.STATE].shape == (15,)
    assert item[keys.ACTION].dtype == torch.float32
    assert item[keys.IMAGE_PREFIX + "front"].shape == (3, 32, 32)
    assert bool(item["next.done"]) and bool(item["next.success"])
    assert item["task"].startswith("pick up the red cube")
    actions = np.stack([ds[i][keys.ACTION].numpy() for i in range(ends[0])])
    assert actions[:, 5].max() > 30 and actions[:, 5].min() < 5  # the gripper opened and closed


def test_record_refuses_to_overwrite_and_checks_its_fields(tmp_path):
    out = tmp_path / "exists"
    out.mkdir()
    assert main(["record", "policy=expert", f"record.output_dir={out}"]) == 2
    with pytest.raises(ConfigError, match=r"record\.episodes"):
        load_config(["record.episodes=0"])
    with pytest.raises(ConfigError, match=r"record\.expert_noise"):
        load_config(["record.expert_noise=2"])
    with pytest.raises(ConfigError, match=r"record\.dart_noise"):
        load_config(["record.dart_noise=-0.1"])


def test_record_without_failures_says_why_it_fell_short(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    argv = [
        "record",
        "env=so101_pick_place",
        "policy=expert",
        "record.episodes=1",
        "record.keep_failures=false",
    ]
    # 10 ticks are too few to pick and place: every attempt fails and is discarded.
    code = main([*argv, f"record.output_dir={tmp_path / 'demos'}", "env.max_episode_ticks=10"])
    out = capsys.readouterr()
    assert code == 1
    assert "3 failed attempts discarded" in out.out
    assert "solved 0 of 3 attempts" in out.err and "env.max_episode_ticks" in out.err


@pytest.mark.slow
def test_dart_executes_the_noise_but_records_the_clean_command(tmp_path, monkeypatch):
    """The reach expert plans its path from the first observation, so with the same seeds the
    clean commands are the same with and without DART noise; the states are not."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from robotrl.policy.data import load_demos

    runs = {}
    for noise in (0.0, 0.05):
        out = tmp_path / f"dart{noise}"
        args = ["record", "env=so101_reach", "policy=expert", "env.cameras=[]", "record.episodes=2"]
        assert main([*args, f"record.output_dir={out}", f"record.dart_noise={noise}"]) == 0
        runs[noise] = load_demos(out, [])
    clean, dart = runs[0.0], runs[0.05]
    assert clean.episode_success == dart.episode_success == [True, True]
    for (c0, c1), (d0, d1) in zip(clean.episode_bounds, dart.episode_bounds, strict=True):
        n = min(c1 - c0, d1 - d0)
        np.testing.assert_array_equal(clean.action[c0 : c0 + n], dart.action[d0 : d0 + n])
        joints_apart = np.abs(clean.state[c0 + 1 : c0 + n, :5] - dart.state[d0 + 1 : d0 + n, :5])
        assert joints_apart.max() > 1.0  # degrees: the executed noise moved the arm


@pytest.mark.slow
def test_deliberate_misses_record_the_clean_label_until_the_grasp_and_then_a_recovery(tmp_path, monkeypatch):
    """The clean expert plans from its own waypoints, so until its first grasp its commands do
    not depend on where the aimed-off arm really is: with every first grasp aimed off, the
    recorded actions up to the first close equal those of a clean recording, while the arm went
    elsewhere, missed, and grasped again."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from robotrl.policy.data import load_demos

    runs = {}
    for rate in (0.0, 1.0):
        out = tmp_path / f"miss{rate}"
        args = ["record", "env=so101_pick_place", "policy=expert", "env.cameras=[]", "record.episodes=2"]
        misses = [f"record.miss_rate={rate}", "record.miss_offset=0.02"]
        assert main([*args, f"record.output_dir={out}", *misses]) == 0
        runs[rate] = load_demos(out, [])
    clean, missed = runs[0.0], runs[1.0]
    assert clean.episode_success == [True, True]
    retried = 0
    for (c0, c1), (m0, m1) in zip(clean.episode_bounds, missed.episode_bounds, strict=True):
        closing = np.flatnonzero(clean.action[c0:c1, 5] < 10)[0]  # the clean label shuts the jaws
        # equal but for the jaws brushing the cube on the way down (it moves a little)
        labels = clean.action[c0 : c0 + closing], missed.action[m0 : m0 + closing]
        np.testing.assert_allclose(*labels, atol=0.5)
        assert np.abs(clean.state[c0 + closing, :5] - missed.state[m0 + closing, :5]).max() > 2.0  # degrees
        shut = missed.action[m0:m1, 5] < 10
        retried += int(np.sum(shut[1:] & ~shut[:-1])) >= 2  # the label closed the jaws twice
    assert retried >= 1


def test_deliberate_misses_are_checked():
    with pytest.raises(ConfigError, match=r"record\.miss_rate"):
        load_config(["env=so101_pick_place", "record.miss_rate=1.5"])
    with pytest.raises(ConfigError, match=r"only for pick-and-place"):
        load_config(["env=so101_reach", "record.miss_rate=0.5"])
    with pytest.raises(ConfigError, match=r"record\.miss_offset"):
        load_config(["record.miss_offset=0"])


@pytest.mark.slow
def test_a_recording_carries_the_scene_it_was_recorded_under(tmp_path, monkeypatch):
    """The source condition travels with the demonstrations, and every episode starts with its
    cube inside that condition's placement ranges (the privileged state holds the cube pose)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from robotrl.data.lerobot_dataset import RecordedDataset

    scene = {
        "cube_azimuth": [0.55, 0.85],
        "cube_radius": [0.19, 0.25],
        "cube_mass_scale": 2.0,
        "cube_friction_scale": 0.5,
    }
    out = tmp_path / "demos"
    args = ["record", "env=so101_pick_place", "policy=expert", "env.cameras=[]", "env.privileged_state=true"]
    shifted = [f"env.scene.{key}={value}".replace(" ", "") for key, value in scene.items()]
    assert main([*args, *shifted, "record.episodes=2", f"record.output_dir={out}"]) == 0
    dataset = RecordedDataset(out)
    assert dataset.scene == scene
    state, names = dataset.column("state"), dataset.names("state")
    x, y = state[:, names.index("cube.x")], state[:, names.index("cube.y")]
    starts = [int(rows[0]) for rows in dataset.episodes()]
    assert len(starts) == 2
    for row in starts:
        assert 0.55 <= np.arctan2(y[row], x[row]) <= 0.85
        assert 0.19 <= np.hypot(x[row], y[row]) <= 0.25


def test_a_dataset_recorded_without_a_scene_says_none(tmp_path):
    from robotrl.data.lerobot_dataset import DatasetWriter, RecordedDataset

    columns = ("state", "instruction", "action")
    writer = DatasetWriter(tmp_path / "plain", "local/plain", 30, columns, (["s"], ["a"]), {}, False)
    for tick in range(3):
        writer.add({"state": [float(tick)], "instruction": "hold", "action": [0.0]})
    writer.save_episode()
    writer.finalize()
    assert RecordedDataset(tmp_path / "plain").scene is None
