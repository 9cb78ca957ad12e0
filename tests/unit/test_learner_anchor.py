"""Anchor buffer: intervention segments, the fastest K successes, demonstrations from a LeRobotDataset."""

from __future__ import annotations

import numpy as np
import pytest
from learner_doubles import episode_batch

from robotrl.core import keys
from robotrl.data.lerobot_dataset import DatasetError
from robotrl.learner.anchor import AnchorBuffer, AnchorFeeder
from robotrl.learner.demos import load_demonstrations
from robotrl.learner.replay import ChunkReplay, ReplaySpec
from robotrl.learner.samples import DONE_KEY, NEXT_PREFIX, REWARD_KEY, VERSION_KEY

H = 4
CAMS = {"front": (8, 8, 3)}


def setup(k: int = 2, cameras: dict | None = None) -> tuple[ChunkReplay, AnchorBuffer, AnchorFeeder]:
    spec = ReplaySpec(2, 3, H, cameras=cameras or {}, gamma=0.9, max_delay=2)
    online = ChunkReplay(spec, 2048, name="online")
    anchor = AnchorBuffer(spec, 512, k, max_episode_ticks=20)
    return online, anchor, AnchorFeeder(online, anchor)


def feed(online: ChunkReplay, feeder: AnchorFeeder, batch) -> None:
    feeder.observe(batch, online.add(batch))


def test_intervention_segments_are_copied_with_their_next_observation():
    online, anchor, feeder = setup(cameras=CAMS)
    flags = np.zeros(12, bool)
    flags[3:7] = True
    ep = episode_batch("a", 1, range(12), end="truncated", intervention=flags, cameras=CAMS)
    # Delivered in pieces that split the intervention run.
    for lo, hi in ((0, 5), (5, 12)):
        piece = episode_batch(
            "a",
            1,
            range(lo, hi),
            end="truncated" if hi == 12 else None,
            intervention=flags[lo:hi],
            cameras=CAMS,
        )
        feed(online, feeder, piece)
    assert len(ep) == 12 and feeder.segments_added == 1
    b = anchor.interventions.sample(200, np.random.default_rng(0))
    ticks = b[keys.STATE][:, 1]
    assert set(ticks.tolist()) == {3, 4, 5, 6}
    real = b[keys.ACTION_MASK].sum(1)
    for i in range(200):
        np.testing.assert_array_equal(b[keys.ACTION][i, : real[i], 1], ticks[i] + np.arange(real[i]))
        assert b[NEXT_PREFIX + keys.STATE][i, 1] == ticks[i] + real[i] <= 7
    assert not b[DONE_KEY].any()
    assert (b[NEXT_PREFIX + keys.IMAGE_PREFIX + "front"][real + ticks == 7] != 0).all()


def test_fastest_k_successes_are_kept_and_slower_ones_evicted():
    online, anchor, feeder = setup(k=2)
    for ep, (length, reward) in enumerate([(10, 1.0), (6, 1.0), (5, 0.0), (8, 1.0), (4, 1.0), (12, 1.0)]):
        rewards = np.zeros(length)
        rewards[-1] = reward
        feed(online, feeder, episode_batch("a", ep, range(length), end="terminated", rewards=rewards))
    assert anchor.successes.lengths() == [4, 6]
    b = anchor.successes.table.sample(300, np.random.default_rng(1))
    assert set(b[keys.STATE][:, 0].tolist()) == {1.0, 4.0}  # episodes of length 6 and 4
    assert feeder.successes_kept == 4  # 10, 6, 8 (evicts 10), 4 (evicts 8); 12 is slower than both


def test_anchor_samples_uniformly_over_its_tables():
    online, anchor, feeder = setup()
    flags = np.ones(3, bool)
    feed(online, feeder, episode_batch("a", 1, range(3), end="truncated", intervention=flags))
    feed(online, feeder, episode_batch("a", 2, range(6), end="terminated", rewards=[0, 0, 0, 0, 0, 1]))
    b = anchor.sample(2000, np.random.default_rng(2))
    frac = (b[keys.STATE][:, 0] == 2).mean()
    assert len(anchor.interventions) == 3 and len(anchor.successes.table) == 6
    assert frac == pytest.approx(6 / 9, abs=0.04)


def make_dataset(root, episodes: int = 3, length: int = 6, state_dim: int = 2):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    features = {
        keys.STATE: {"dtype": "float32", "shape": (state_dim,), "names": None},
        keys.IMAGE_PREFIX + "front": {
            "dtype": "image",
            "shape": (8, 8, 3),
            "names": ["height", "width", "channels"],
        },
        keys.ACTION: {"dtype": "float32", "shape": (3,), "names": None},
    }
    ds = LeRobotDataset.create("local/demos", fps=30, features=features, root=root, use_videos=False)
    for ep in range(episodes):
        for t in range(length):
            ds.add_frame(
                {
                    keys.STATE: np.array([ep, t, *[0] * (state_dim - 2)], np.float32),
                    keys.IMAGE_PREFIX + "front": np.full((8, 8, 3), 10 * t, np.uint8),
                    keys.ACTION: np.array([ep, t, 0], np.float32),
                    keys.TASK: "pick the cube",
                }
            )
        ds.save_episode()
    ds.finalize()


def test_demonstrations_load_from_a_local_lerobot_dataset(tmp_path):
    make_dataset(tmp_path / "demos")
    spec = ReplaySpec(2, 3, H, cameras=CAMS, gamma=0.9, max_delay=2)
    episodes = load_demonstrations(tmp_path / "demos", spec, success_reward=10.0)
    assert [len(e) for e in episodes] == [6, 6, 6]
    anchor = AnchorBuffer(spec, 256, 2, max_episode_ticks=20)
    anchor.load_demos(episodes, 18)
    b = anchor.sample(300, np.random.default_rng(3))
    ticks = b[keys.STATE][:, 1].astype(int)
    assert (b[keys.IMAGE_PREFIX + "front"][:, 0, 0, 0] == 10 * ticks).all()
    np.testing.assert_array_equal(b[keys.ACTION][:, 0, 1], ticks)
    assert (b[VERSION_KEY] == -1).all() and b[keys.TASK][0] == "pick the cube"
    last = ticks + b[keys.ACTION_MASK].sum(1) == 6
    assert b[DONE_KEY][last].all() and not b[DONE_KEY][~last].any()
    np.testing.assert_allclose(b[REWARD_KEY][last], 10.0 * 0.9 ** (5 - ticks[last]), rtol=1e-5)


def test_a_demonstration_window_reaches_the_learner_as_pretraining_saw_it(tmp_path):
    # Fine-tuning continues pretraining: windows that run past an episode's end must be padded
    # alike, or the first updates pull the pretrained policy toward a different input.
    from robotrl.policy.data import ChunkSampler, load_demos

    make_dataset(tmp_path / "demos")
    spec = ReplaySpec(2, 3, H, cameras=CAMS, gamma=0.9, max_delay=2)
    anchor = AnchorBuffer(spec, 256, 2, max_episode_ticks=20)
    anchor.load_demos(load_demonstrations(tmp_path / "demos", spec, success_reward=1.0), 18)
    b = anchor.sample(300, np.random.default_rng(3))
    demos = load_demos(tmp_path / "demos", [])
    frames = (6 * b[keys.STATE][:, 0] + b[keys.STATE][:, 1]).astype(np.int64)  # episodes of 6 frames
    pretraining = ChunkSampler(demos, np.arange(18), H, max_delay=2).batch_at(frames, np.zeros_like(frames))
    assert not b[keys.ACTION_MASK].all()  # some windows run past their episode's end
    np.testing.assert_array_equal(b[keys.ACTION], pretraining[keys.ACTION].numpy())
    np.testing.assert_array_equal(b[keys.ACTION_MASK], pretraining[keys.ACTION_MASK].numpy())


def test_demonstrations_with_the_wrong_state_size_are_refused_by_name(tmp_path):
    make_dataset(tmp_path / "demos", episodes=1, state_dim=5)
    spec = ReplaySpec(2, 3, H, cameras=CAMS)
    with pytest.raises(ValueError, match=r"'observation.state' has shape \(5,\), the learner needs \(2,\)"):
        load_demonstrations(tmp_path / "demos", spec, 1.0)
    with pytest.raises(DatasetError, match="not a local LeRobotDataset"):
        load_demonstrations(tmp_path / "nowhere", spec, 1.0)
