"""The real-arm path against lerobot's SO-101 classes whose serial port is faked.

No test here needs a physical arm: the servos are :mod:`robotrl.hardware.fake_serial`
(1-3 ms per bus transaction, corrupted replies on demand), everything above the serial
port is lerobot's and robotrl's real code.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hardware_fakes import KeyPipe, build_limits, fake_env, fake_follower, fake_leader, hardware_config
from robotrl.hardware.env import NON_FINITE_READING, ArmStoppedError, LerobotRobotEnv
from robotrl.hardware.fake_serial import RESOLUTION
from robotrl.hardware.safety import SafetyLayer
from robotrl.sim import so101
from waiting import wait_until

STEPS_PER_DEGREE = RESOLUTION / 360.0
MID = RESOLUTION // 2


def degrees(raw: int) -> float:
    """A joint's raw goal as lerobot's degrees (the fake's calibration is centred on MID)."""
    return (raw - MID) / STEPS_PER_DEGREE


@pytest.fixture
def close_after():
    envs = []
    yield envs.append
    for env in envs:
        env.close()


def test_action_outside_the_joint_limits_never_reaches_the_bus_unclamped(tmp_path, close_after):
    env, chain = fake_env(tmp_path, max_step=0.0, max_velocity=0.0)
    close_after(env)
    env.reset()
    wild = np.array([1e4, -1e4, 500.0, -500.0, 1e6, 1e3], np.float32)
    for _ in range(3):
        result = env.step(wild)
    nan = env.step(np.full(6, np.nan, np.float32))
    assert np.all(np.isfinite(nan.info["executed"]))
    for j, sid in enumerate(range(1, 6)):
        for raw in chain.servos[sid].goal_writes:
            assert so101.ACTION_LOW[j] - 0.2 <= degrees(raw) <= so101.ACTION_HIGH[j] + 0.2, (sid, raw)
    np.testing.assert_array_equal(result.info["executed"], np.clip(wild, so101.ACTION_LOW, so101.ACTION_HIGH))
    assert env.safety.counts["joint_limit"] == 3 and env.safety.counts["non_finite"] == 1


def test_every_command_moves_at_most_max_step_per_tick(tmp_path, close_after):
    env, chain = fake_env(tmp_path, max_step=2.0, max_velocity=0.0)
    close_after(env)
    env.reset()
    target = np.array([60, -60, 30, 0, 0, 90], np.float32)
    for _ in range(5):
        env.step(target)
    goals = [degrees(g) for g in chain.servos[1].goal_writes]
    assert len(goals) == 5
    assert np.all(np.abs(np.diff([0.0, *goals])) <= 2.0 + 0.1)
    assert env.safety.counts["max_step"] == 5


def test_watchdog_holds_the_arm_when_commands_stop(tmp_path, close_after):
    env, chain = fake_env(tmp_path, max_step=0.0, max_velocity=0.0, watchdog_s=0.1)
    close_after(env)
    env.reset()
    env.step(np.array([80, 0, 0, 0, 0, 50], np.float32))  # far away: the joint is still moving
    # The control loop stalls here (no more steps): the watchdog must hold the arm where it is.
    wait_until(lambda: env.counts["watchdog_holds"] == 1, 5, "the watchdog holding the arm")
    snap = chain.snapshot()[1]
    assert abs(snap["goal"] - snap["present"]) <= 60  # the goal is where the arm was, not 80 degrees
    assert degrees(snap["goal"]) < 70
    assert env.watchdog.expiries == 1


def report_nan_on_reads(robot, reads: set[int]) -> None:
    """The robot reports NaN for shoulder_pan on these reads (0-based), as a faulty sensor or a
    driver that lost calibration would; everything else is the real bus."""
    read_observation, numbered = robot.get_observation, itertools.count()

    def observe():
        raw = read_observation()
        if next(numbered) in reads:
            raw["shoulder_pan.pos"] = float("nan")
        return raw

    robot.get_observation = observe


def goal_writes(chain) -> list[int]:
    return [len(servo.goal_writes) for servo in chain.servos.values()]


def test_a_nan_reading_at_reset_sends_nothing_holds_and_ends_the_episode(tmp_path, close_after):
    env, chain = fake_env(tmp_path)
    close_after(env)
    report_nan_on_reads(env.robot, {0})
    held = chain.snapshot()
    before = goal_writes(chain)
    obs = env.reset()
    assert np.all(np.isfinite(obs.state))
    result = env.step(np.full(6, 10.0, np.float32))
    assert result.truncated and not result.terminated
    assert result.info["outcome"].startswith(NON_FINITE_READING) and "shoulder_pan" in result.info["outcome"]
    assert np.all(np.isfinite(result.info["executed"])) and np.all(np.isfinite(result.observation.state))
    assert goal_writes(chain) == before  # nothing reached the bus: every servo keeps its last goal
    assert {s: v["goal"] for s, v in chain.snapshot().items()} == {s: v["goal"] for s, v in held.items()}
    assert env.counts["non_finite_readings"] == 1
    env.reset()  # the next episode starts from a good reading and drives the arm again
    assert not env.step(np.full(6, 1.0, np.float32)).truncated
    assert goal_writes(chain) == [n + 1 for n in before]


def test_a_nan_reading_mid_episode_ends_it_and_no_non_finite_command_is_sent(tmp_path, close_after):
    env, chain = fake_env(tmp_path)
    close_after(env)
    report_nan_on_reads(env.robot, {3, 4})  # reset, two steps, then NaN, and NaN again on a hold
    env.reset()
    results = [env.step(np.full(6, 5.0, np.float32)) for _ in range(3)]
    assert [r.truncated for r in results] == [False, False, True]
    assert results[-1].info["outcome"].startswith(NON_FINITE_READING)
    assert goal_writes(chain) == [3] * 6
    env.hold()  # a watchdog's or stop's hold re-reads the arm: a NaN there is refused too
    assert env.counts["non_finite_commands"] == 1 and goal_writes(chain) == [3] * 6


def test_a_bus_call_past_the_stall_time_makes_the_env_unresponsive(tmp_path):
    """What the heartbeat to the arm supervisor rests on, on an injected clock: the arm counts as
    hung while one bus call has run longer than the stall time, and only then."""
    robot, _ = fake_follower(tmp_path)
    robot.connect()
    now = [0.0]
    limits = build_limits(hardware_config().hardware, tuple(robot.action_features))
    safety = SafetyLayer(limits)
    env = LerobotRobotEnv(robot, safety, control_hz=30, max_episode_ticks=10, clock=lambda: now[0])
    seen: list[tuple[bool, bool]] = []
    read_observation = robot.get_observation

    def slow_read():
        now[0] += 0.3  # this read takes 0.3 s
        seen.append((env.responsive(0.25), env.responsive(0.5)))
        return read_observation()

    robot.get_observation = slow_read
    try:
        assert env.responsive(0.0)
        env.reset()
        assert seen == [(False, True)]
        assert env.responsive(0.0)  # no bus call in flight
    finally:
        env.close()


def test_emergency_stop_holds_within_one_tick_and_stays_latched(tmp_path, close_after):
    keys = KeyPipe()
    env, chain = fake_env(tmp_path, keys=keys, max_step=0.0, max_velocity=0.0)
    close_after(env)
    env.reset()
    env.step(np.array([10, 0, 0, 0, 0, 50], np.float32))
    pan = chain.servos[1]
    writes = len(pan.goal_writes)
    keys.type(" ")
    # The key reader holds the arm at once, without waiting for the next tick.
    wait_until(lambda: len(pan.goal_writes) > writes, 5, "the e-stop's hold command")
    assert env.safety.estop.pressed and degrees(pan.goal_writes[-1]) <= 10.1
    stopped = env.step(np.array([80, 0, 0, 0, 0, 50], np.float32))
    held = stopped.info["executed"]
    assert stopped.info["estop"] and stopped.truncated and stopped.info["estops"] == 1
    assert held[0] <= 10.1  # the 80-degree command never went out
    again = env.step(np.array([-80, 0, 0, 0, 0, 50], np.float32))
    np.testing.assert_array_equal(again.info["executed"], held)
    assert env.safety.counts["estop_hold"] == 2
    assert all(degrees(g) <= 10.1 for g in pan.goal_writes[writes:])
    with pytest.raises(ArmStoppedError, match="emergency stop"):
        env.reset()
    keys.close()


def test_a_read_failure_is_counted_and_the_loop_goes_on(tmp_path, close_after):
    env, chain = fake_env(tmp_path)
    close_after(env)
    env.reset()
    before = env.step(np.zeros(6, np.float32)).observation
    chain.fail_next_reads = 3  # lerobot retries twice: the third corrupted reply fails the read
    after = env.step(np.zeros(6, np.float32))
    assert env.counts["read_failures"] == 1 and chain.corrupted_replies == 3
    np.testing.assert_array_equal(after.observation.state[:6], before.state[:6])
    env.step(np.zeros(6, np.float32))
    assert env.counts["read_failures"] == 1


def test_too_many_failed_reads_stop_the_actor_and_leave_the_arm_safe(tmp_path):
    env, chain = fake_env(tmp_path, max_read_failures=2, disable_torque_on_stop=True)
    env.reset()
    chain.fail_next_reads = 10**6
    for _ in range(2):  # max_read_failures failed reads are survived
        env.step(np.zeros(6, np.float32))
    with pytest.raises(ArmStoppedError, match="3 failed reads in a row"):
        env.step(np.zeros(6, np.float32))
    assert not chain.is_open and env.counts["safe_stops"] == 1
    assert not any(s.torque_enabled for s in chain.servos.values())
    env.close()


def test_intervention_flows_into_transitions_with_its_flag(tmp_path, close_after):
    from robotrl.actor.compose import build_loop
    from robotrl.actor.inference import InProcessInference
    from robotrl.actor.slots import PolicySlots

    leader, leader_chain = fake_leader(tmp_path)
    keys = KeyPipe()
    env, _ = fake_env(tmp_path, keys=keys, teleop=leader, ticks=30, max_step=0.0, max_velocity=0.0)
    close_after(env)
    for sid in range(1, 7):  # the human holds the leader arm 20 degrees off centre
        leader_chain.servos[sid].actual = MID + 20 * STEPS_PER_DEGREE
    human_pose = leader.get_action()
    recorded = []
    cfg = hardware_actor_config()
    loop = build_loop(
        env, InProcessInference(PolicySlots(HoldPolicy(), HoldPolicy())), cfg, 8, None, sink=recorded.extend
    )
    keys.type("i")  # take over for the first ticks
    wait_until(lambda: keys.source._keys.qsize() == 1, 10, "the reader thread to take the key")
    ticked = []

    class GiveBack:
        def on_tick(self, *args):
            ticked.append(1)
            if len(ticked) == 10:
                keys.type("i")

        def on_chunk(self, *args):
            pass

        def close(self):
            pass

    loop.observer = GiveBack()
    result = loop.run_episode(0, seed=0)
    assert result.failure is None and result.ticks == env.spec.max_episode_ticks
    flags = [t.intervention for t in recorded]
    assert flags[0] and not flags[-1] and sum(flags) >= 9
    expected = np.array([human_pose[n] for n in env.action_names], np.float32)
    for t in recorded:
        if t.intervention:
            np.testing.assert_allclose(t.action, expected, atol=1e-4)
            assert not np.allclose(t.proposed_action, expected)
    keys.close()
    leader.disconnect()


def hardware_actor_config():
    from robotrl.config.actor import ActorConfig

    cfg = ActorConfig()
    cfg.virtual_time = False
    return cfg


class HoldPolicy:
    """Asks every joint to stay where it is (the human's pose differs from it)."""

    horizon = 8
    action_dim = 6

    def infer(self, observation, prefix, delay):
        chunk = np.repeat(observation.state[None, :6], self.horizon, axis=0).astype(np.float32)
        if prefix is not None and delay:
            chunk[:delay] = prefix[:delay]
        return chunk

    def per_sample_loss(self, batch):
        raise NotImplementedError("never trained")

    def trainable_tensors(self):
        return {}

    def load_weights(self, tensors):
        pass


CRASHING_ACTOR = textwrap.dedent(
    """
    import json, os, signal, sys
    sys.path[:0] = [sys.argv[2]]
    from pathlib import Path
    import numpy as np
    from hardware_fakes import fake_env
    env, chain = fake_env(Path(sys.argv[1]), max_step=0.0, disable_torque_on_stop={torque})
    out = Path(sys.argv[1]) / "left.json"
    chain.on_close = lambda c: out.write_text(json.dumps(c.snapshot()))
    env.reset()
    env.step(np.array([80, 0, 0, 0, 0, 50], np.float32))
    {crash}
    """
)


@pytest.mark.parametrize(
    ("crash", "torque"),
    [
        ("raise RuntimeError('the actor crashed')", False),
        ("os.kill(os.getpid(), signal.SIGTERM); signal.pause()", True),
    ],
    ids=["exception", "sigterm"],
)
def test_a_crashed_actor_leaves_the_fake_arm_safe(tmp_path, crash, torque):
    script = CRASHING_ACTOR.format(crash=crash, torque=torque)
    tests_dir = str(Path(__file__).resolve().parents[1])
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path), tests_dir], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode != 0
    left = json.loads((tmp_path / "left.json").read_text())
    pan = left["1"]
    assert pan["torque"] is (not torque)
    if not torque:  # holding: the goal is where the arm was when the actor died, not the 80-degree target
        assert degrees(pan["goal"]) < 70 and abs(pan["goal"] - pan["present"]) <= 60


def test_robot_and_leader_come_from_lerobot_config_types(tmp_path):
    from robotrl.hardware.factory import make_robot, make_teleop

    cfg = hardware_config()
    cfg.hardware.calibration_dir = str(tmp_path)
    cfg.hardware.teleop_type = "so101_leader"
    robot, teleop = make_robot(cfg.hardware), make_teleop(cfg.hardware)
    assert type(robot).__name__ == "SOFollower" and type(teleop).__name__ == "SOLeader"
    cfg.hardware.robot_type = "koch_follower"  # chosen by type: lerobot's Koch class asks for its SDK
    with pytest.raises(ImportError, match="lerobot\\[dynamixel\\]"):
        make_robot(cfg.hardware)
    cfg.hardware.robot_type = "no_such_arm"
    with pytest.raises(ValueError, match="unknown lerobot robot 'no_such_arm'"):
        make_robot(cfg.hardware)


def test_check_arm_reports_the_joints_a_limp_arm_holds_outside_the_limits(tmp_path, capsys):
    from robotrl.cli import main as cli

    code = cli(
        [
            "check-arm",
            "hardware.robot_type=robotrl_fake_so101",
            "+hardware.robot_options={pose_degrees: -105}",
            f"hardware.calibration_dir={tmp_path}",
            "hardware.check_seconds=0.5",
        ]
    )
    assert code == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["reads"] > 0
    # -105 degrees is inside the pan (+-110) and roll ranges, outside lift, elbow and wrist flex.
    outside = {name for name, n in report["outside_limits"].items() if n}
    assert outside == {"shoulder_lift.pos", "elbow_flex.pos", "wrist_flex.pos"}
    assert report["seen"]["shoulder_lift.pos"][0] == pytest.approx(-105, abs=0.5)


def test_the_next_episode_waits_for_the_operator_to_reset_the_scene(tmp_path, close_after):
    import threading

    keys = KeyPipe()
    env, _ = fake_env(tmp_path, keys=keys)
    env.wait_for_reset = True
    close_after(env)
    env.reset()  # the first episode starts at once
    env.step(np.zeros(6, np.float32))
    started = threading.Event()
    threading.Thread(target=lambda: (env.reset(), started.set()), daemon=True).start()
    assert not started.wait(0.3)  # holds until the operator says the scene is ready
    keys.type("n")
    assert started.wait(5)
    keys.close()


def test_a_configured_success_detector_ends_the_episode_with_the_reward(tmp_path, close_after):
    env, _ = fake_env(tmp_path, detector="hardware_fakes:pan_past_30_degrees", max_step=10.0)
    close_after(env)
    env.reset()
    target = np.array([45, 0, 0, 0, 0, 50], np.float32)
    for _ in range(200):
        result = env.step(target)
        if result.terminated:
            break
    assert result.terminated and result.info["is_success"] and result.reward == 1.0
    assert result.observation.state[0] > 30


def test_a_detector_that_does_not_exist_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"hardware\.success_detector: cannot load"):
        fake_env(tmp_path, detector="hardware_fakes:no_such_function")


def test_the_robots_camera_becomes_an_observation_image(tmp_path, close_after):
    """lerobot's ZeroMQ camera (a real camera class) fed by a publisher on an OS-assigned port."""
    import threading

    import zmq
    from lerobot.cameras.zmq.image_server import encode_image
    from robotrl.hardware.factory import hardware_spec, make_hardware_env

    rgb = np.zeros((48, 64, 3), np.uint8)
    rgb[:, :32, 0] = 255  # the left half red
    # Encoded as lerobot's own image server encodes a camera frame.
    message = json.dumps({"timestamps": {"front": 0.0}, "images": {"front": encode_image(rgb)}})
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    stop = threading.Event()

    def publish() -> None:
        while not stop.is_set():
            pub.send_string(message)
            stop.wait(1 / 30)

    threading.Thread(target=publish, daemon=True).start()
    try:
        cfg = hardware_config()
        cfg.hardware.robot_type = "robotrl_fake_so101"
        cfg.hardware.calibration_dir = str(tmp_path)
        cfg.hardware.cameras = {
            "front": {
                "type": "zmq",
                "server_address": "127.0.0.1",
                "port": port,
                "camera_name": "front",
                "width": 64,
                "height": 48,
                "fps": 30,
            }
        }
        assert dict(hardware_spec(cfg).camera_shapes) == {"front": (48, 64, 3)}
        env = make_hardware_env(cfg)
        close_after(env)
        image = env.reset().images["front"]
        assert image.shape == (48, 64, 3) and image.dtype == np.uint8
        assert image[:, :28, 0].mean() > 200 and image[:, 36:, 0].mean() < 50  # RGB: red on the left
        step = env.step(env.reset().state[:6])
        assert step.observation.images["front"].shape == (48, 64, 3)
        env.close()  # the camera disconnects before its publisher goes
    finally:
        stop.set()
        pub.close(linger=0)
        ctx.term()
