"""A pixel policy on the real-arm path: the built-in flow policy reads two fake cameras (front,
wrist) of the fake SO-101 (``hardware=fake_so101``) through the hardware adapter, in wall-clock
time, with no arm and no camera."""

from __future__ import annotations

import json
from itertools import pairwise
from typing import Any

import numpy as np
import pytest
from robotrl.hardware.factory import make_hardware_env
from robotrl.hardware.fake_camera import frame_index

from robotrl.actor.compose import build_loop, make_policy
from robotrl.actor.inference import InProcessInference
from robotrl.actor.slots import PolicySlots, spare_of
from robotrl.cli import main as cli
from robotrl.config.load import load_config
from robotrl.core.types import Observation

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PIXEL_ARM = [
    "hardware=fake_so101",
    "policy=flow_tiny",
    "env.privileged_state=false",
    "env.cameras=[front,wrist]",
    "hardware.keys=false",
]


class Seeing:
    """The flow policy, noting the camera frames of every observation it is asked to act on."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.frames: list[dict[str, np.ndarray]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.policy, name)

    def infer(self, observation: Observation, prefix: Any, delay: int) -> Any:
        self.frames.append({cam: np.array(img) for cam, img in observation.images.items()})
        return self.policy.infer(observation, prefix, delay)


def test_flow_policy_acts_on_fresh_frames_of_both_fake_cameras(tmp_path):
    import torch

    cfg = load_config(
        [
            *PIXEL_ARM,
            "actor=real_arm",
            f"hardware.calibration_dir={tmp_path}",
            "env.max_episode_ticks=30",
            "actor.execution_horizon=4",  # a new chunk every 4 ticks: several inferences in one second
        ]
    )
    env = make_hardware_env(cfg)
    try:
        assert dict(env.spec.camera_shapes) == {"front": (96, 96, 3), "wrist": (96, 96, 3)}
        torch.manual_seed(0)
        policy = make_policy(cfg.policy, env.spec)
        assert policy.cameras == ("front", "wrist")  # type: ignore[attr-defined]
        seeing = Seeing(policy)
        backend = InProcessInference(PolicySlots(seeing, spare_of(policy)), bounds=env.spec.action_bounds())
        loop = build_loop(env, backend, cfg.actor, policy.horizon, None, max_prefix=cfg.policy.max_delay)
        result = loop.run_episode(0, seed=0)
    finally:
        env.close()
    assert result.failure is None and result.ticks == 30, result
    assert len(seeing.frames) >= 4, len(seeing.frames)
    for frames in seeing.frames:
        assert {cam: (img.shape, img.dtype) for cam, img in frames.items()} == {
            "front": ((96, 96, 3), np.uint8),
            "wrist": ((96, 96, 3), np.uint8),
        }
        assert not np.array_equal(frames["front"], frames["wrist"])
    for cam in ("front", "wrist"):
        seen = [frame_index(frames[cam]) for frames in seeing.frames]
        assert all(b > a for a, b in pairwise(seen)), (cam, seen)  # a new frame each time
        pixels = [frames[cam] for frames in seeing.frames]
        assert all(not np.array_equal(a[1:], b[1:]) for a, b in pairwise(pixels))


@pytest.mark.slow
def test_eval_on_the_fake_arm_runs_the_pixel_policy_in_its_worker(tmp_path, capsys):
    """`robotrl eval actor=real_arm hardware=fake_so101`: the policy in the actor's worker process
    reads both cameras every inference (a missing or misshapen frame is an inference error)."""
    code = cli(
        [
            "eval",
            *PIXEL_ARM,
            "actor=real_arm",
            "actor.episodes=1",
            f"hardware.calibration_dir={tmp_path}/calibration",
            "env.max_episode_ticks=45",
            f"run_dir={tmp_path}",
        ]
    )
    assert code == 0
    summary = json.loads((tmp_path / "eval_summary.json").read_text())
    assert summary["env"] == "lerobot/robotrl_fake_so101" and summary["ticks"] == 45, summary
    assert summary["inference_errors"] == 0 and summary["failures"] == [] and summary["chunks_merged"] >= 1
