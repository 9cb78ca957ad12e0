"""lerobot drives the simulated SO-101 through its own Robot interface and factory."""

from __future__ import annotations

import numpy as np
import pytest
from lerobot.robots.robot import Robot
from lerobot.robots.utils import make_robot_from_config
from lerobot.utils.errors import DeviceNotConnectedError
from robotrl.sim.config_so101_sim import SO101SimConfig
from robotrl.sim.so101_sim import SO101Sim

from robotrl.config.scene import SceneConfig


def test_lerobot_factory_builds_the_sim_robot(tmp_path):
    robot = make_robot_from_config(SO101SimConfig(id="sim", calibration_dir=tmp_path, sim_cameras=[]))
    assert isinstance(robot, SO101Sim) and isinstance(robot, Robot)
    assert robot.robot_type == "robotrl_so101_sim"


def test_robot_connects_observes_acts_and_disconnects(tmp_path):
    cfg = SO101SimConfig(id="sim", calibration_dir=tmp_path, task="robotrl/SO101Reach-v0", image_size=32)
    robot = SO101Sim(cfg)
    assert not robot.is_connected
    with pytest.raises(DeviceNotConnectedError):
        robot.get_observation()
    robot.connect()
    assert robot.is_connected and robot.is_calibrated
    obs = robot.get_observation()
    assert set(obs) == set(robot.observation_features)
    assert obs["front"].shape == (32, 32, 3) and obs["wrist"].dtype == np.uint8
    target = {k: obs[k] for k in robot.action_features}
    target["shoulder_pan.pos"] += 20.0
    target["gripper.pos"] = 500.0  # out of range: clipped, never crashes
    for _ in range(30):
        sent = robot.send_action(target)
    assert sent["gripper.pos"] == 100.0
    moved = robot.get_observation()
    assert moved["shoulder_pan.pos"] - obs["shoulder_pan.pos"] == pytest.approx(20.0, abs=3.0)
    with pytest.raises(ValueError, match="lacks"):
        robot.send_action({"shoulder_pan.pos": 0.0})
    robot.disconnect()
    assert not robot.is_connected


def test_the_sim_robot_runs_in_the_scene_its_config_names(tmp_path):
    """lerobot's tools record in a chosen condition too (``--robot.scene.cube_azimuth=[0.6,0.8]``)."""
    scene = SceneConfig(cube_azimuth=[0.6, 0.8], cube_mass_scale=2.0)
    robot = SO101Sim(SO101SimConfig(id="sim", calibration_dir=tmp_path, sim_cameras=[], scene=scene))
    robot.connect()
    assert robot.env is not None and robot.env.scene == scene
    for seed in range(5):
        robot.reset(seed=seed)
        x, y = robot.env.cube_pose[:2]
        assert 0.6 <= np.arctan2(y, x) <= 0.8
    robot.disconnect()
