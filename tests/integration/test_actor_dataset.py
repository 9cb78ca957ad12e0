"""actor.record_dataset: the actor's episodes as a LeRobotDataset that lerobot loads, with the
actor's stamps, written off the control thread; robotrl replay reproduces them."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
from lerobot.datasets.lerobot_dataset import LeRobotDataset

from robotrl.actor.dataset import DatasetRecorder
from robotrl.actor.run import run_episodes
from robotrl.config.load import ConfigError, load_config
from robotrl.core.types import EnvSpec, Observation, Transition
from robotrl.replay.main import main as replay

TRACK = ["env=so101_track", "policy=flow_tiny", "env.max_episode_ticks=40", "actor.episodes=2", "seed=3"]
STAMPS = ("policy_version", "chunk_id", "index_in_chunk", "delay_ticks", "intervention", "seed", "tick")


def _record(tmp_path: Path, *overrides: str) -> tuple[dict, LeRobotDataset]:
    root = tmp_path / "episodes"
    cfg = load_config([*TRACK, f"actor.record_dataset={root}", "actor.seed=500", *overrides])
    summary = run_episodes(cfg, None, "record")
    return summary, LeRobotDataset("local/episodes", root=root)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("cameras", [[], ["front", "wrist"]], ids=["state_only", "cameras"])
def test_lerobot_loads_the_recorded_episodes_with_the_actor_stamps(tmp_path: Path, cameras: list[str]):
    summary, ds = _record(tmp_path, f"env.cameras=[{','.join(cameras)}]", "env.image_size=32")
    assert summary["dataset"]["dropped_frames"] == 0
    assert ds.num_episodes == summary["episodes"] == 2
    assert ds.num_frames == summary["ticks"] == summary["dataset"]["frames"]
    assert sorted(ds.meta.camera_keys) == [f"observation.images.{c}" for c in sorted(cameras)]
    for stamp in STAMPS:
        assert stamp in ds.features
    cols = ds.hf_dataset.with_format("numpy")
    episode = np.asarray(cols["episode_index"])
    seeds = np.asarray(cols["seed"])
    assert set(seeds[episode == 0]) == {500} and set(seeds[episode == 1]) == {501}
    np.testing.assert_array_equal(np.asarray(cols["tick"]), np.asarray(cols["frame_index"]))
    chunk, row = np.asarray(cols["chunk_id"]), np.asarray(cols["index_in_chunk"])
    assert (chunk >= 0).all() and (row >= np.asarray(cols["delay_ticks"])).all()
    assert (np.asarray(cols["policy_version"]) == 0).all()  # a fresh policy, no learner
    item = ds[5]
    assert item["observation.state"].shape == (18,) and item["action"].shape == (6,)
    for cam in cameras:
        assert item[f"observation.images.{cam}"].shape == (3, 32, 32)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_replay_open_loop_reproduces_an_actor_recording_from_its_stored_seeds(tmp_path: Path):
    _record(tmp_path, "env.cameras=[]")
    cfg = load_config([*TRACK, "env.cameras=[]", f"dataset={tmp_path / 'episodes'}", f"run_dir={tmp_path}"])
    assert replay(cfg) == 0  # replay.seed is 0: the seeds come from the dataset
    report = json.loads((tmp_path / "replay_open_loop.json").read_text())
    assert report["reproduced"] == 2
    assert [ep["seed"] for ep in report["episodes"]] == [500, 501]


def test_an_existing_folder_is_refused_unless_overwrite(tmp_path: Path):
    (tmp_path / "old").mkdir()
    with pytest.raises(ConfigError, match=r"actor\.record_dataset"):
        load_config([f"actor.record_dataset={tmp_path / 'old'}"])
    load_config([f"actor.record_dataset={tmp_path / 'old'}", "actor.record_overwrite=true"])
    with pytest.raises(ConfigError, match=r"actor\.record_dataset"):
        load_config(["actor.record_dataset=' '"])


SPEC = EnvSpec(
    name="line",
    action_names=("a", "b"),
    action_low=(-1.0, -1.0),
    action_high=(1.0, 1.0),
    state_names=("x", "y"),
    instruction="stay",
)


def _episode(episode_id: int, ticks: int) -> list[Transition]:
    out = []
    for tick in range(ticks):
        obs = Observation(tick=tick, state=np.array([tick, episode_id], np.float32), instruction="stay")
        last = tick == ticks - 1
        out.append(
            Transition(
                "a",
                episode_id,
                tick,
                obs,
                np.zeros(2, np.float32),
                np.zeros(2, np.float32),
                0.0,
                last,
                False,
                False,
                1,
                tick,
                2,
                0,
            )
        )
    return out


class _SlowDataset:
    """Stands in for the LeRobotDataset to make the writer slow: add_frame waits on ``gate``."""

    def __init__(self, gate: threading.Event) -> None:
        self.gate, self.frames, self.saved = gate, 0, 0

    def add(self, values: dict, success: bool | None = None, extra: dict | None = None) -> None:
        self.gate.wait()
        self.frames += 1

    def save_episode(self) -> None:
        self.saved += 1

    def finalize(self) -> None:
        pass


def test_a_full_queue_drops_and_counts_in_wall_clock_time_and_never_blocks(tmp_path: Path):
    rec = DatasetRecorder(tmp_path / "ds", SPEC, seed_base=0, block=False, video=False, max_pending_frames=10)
    gate = threading.Event()
    rec._dataset = _SlowDataset(gate)  # the writer is stuck on its first frame
    rec(_episode(0, 8))
    rec(_episode(1, 8))  # 16 > 10 pending: dropped at once, not waited for
    assert rec.dropped == 8
    gate.set()
    stats = rec.close()
    assert stats == {"path": str(tmp_path / "ds"), "episodes": 1, "frames": 8, "dropped_frames": 8}


def test_virtual_time_waits_for_room_and_loses_nothing(tmp_path: Path):
    rec = DatasetRecorder(tmp_path / "ds", SPEC, seed_base=0, block=True, video=False, max_pending_frames=10)
    for i in range(6):
        rec(_episode(i, 7))
    stats = rec.close()
    assert stats["frames"] == 42 and stats["episodes"] == 6 and stats["dropped_frames"] == 0
    ds = LeRobotDataset("local/ds", root=tmp_path / "ds")
    assert ds.num_episodes == 6 and ds.num_frames == 42


def test_an_episode_stopped_without_done_is_saved_when_the_next_one_starts(tmp_path: Path):
    rec = DatasetRecorder(tmp_path / "ds", SPEC, seed_base=10, block=True, video=False)
    rec(_episode(0, 5)[:3])  # stopped (Ctrl-C) after three ticks: no done flag
    rec(_episode(1, 4))
    rec(_episode(2, 6)[:2])  # the last one is cut short too: saved by close()
    assert rec.close()["episodes"] == 3
    ds = LeRobotDataset("local/ds", root=tmp_path / "ds")
    lengths = np.bincount(np.asarray(ds.hf_dataset.with_format("numpy")["episode_index"]))
    assert lengths.tolist() == [3, 4, 2]
