"""The safety layer, watchdog and arm guard on their own (no bus)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from robotrl.hardware.factory import so101_kinematics
from robotrl.hardware.safety import ArmGuard, EmergencyStop, SafetyLayer, SafetyLimits, Watchdog
from waiting import wait_until

from robotrl.config.load import ConfigError, compose_config, to_config

N = 6
LOW, HIGH = np.full(N, -90, np.float32), np.full(N, 90, np.float32)


def layer(**kw) -> SafetyLayer:
    limits = SafetyLimits(LOW, HIGH, **kw)
    safety = SafetyLayer(
        limits, kinematics=so101_kinematics() if kw.get("workspace_low") is not None else None
    )
    safety.reset(np.zeros(N, np.float32))
    return safety


def test_commands_inside_every_limit_pass_unchanged_and_uncounted():
    safety = layer(max_step=np.full(N, 5, np.float32), max_velocity=np.full(N, 100, np.float32))
    cmd = np.array([1, -2, 3, -4, 4.5, 0], np.float32)
    np.testing.assert_array_equal(safety(cmd, np.zeros(N, np.float32), np.zeros(N, np.float32)), cmd)
    assert sum(safety.counts.values()) == 0


def test_a_joint_moving_too_fast_makes_the_arm_hold_where_it_is():
    safety = layer(max_velocity=np.full(N, 100, np.float32))
    present = np.full(N, 10, np.float32)
    speed = np.zeros(N, np.float32)
    speed[2] = 250
    out = safety(np.full(N, 40, np.float32), present, speed)
    np.testing.assert_array_equal(out, present)
    assert safety.counts["overspeed"] == 1


def test_a_command_that_leaves_the_workspace_box_keeps_the_last_command():
    fk = so101_kinematics()
    home = fk(np.zeros(N, np.float32))
    safety = layer(workspace_low=home - 0.05, workspace_high=home + 0.05)
    small = np.array([2, 0, 0, 0, 0, 0], np.float32)
    np.testing.assert_array_equal(safety(small, np.zeros(N, np.float32)), small)
    far = np.array([0, 60, -60, 0, 0, 0], np.float32)
    assert np.any(np.abs(fk(far) - home) > 0.05)
    np.testing.assert_array_equal(safety(far, small), small)
    assert safety.counts["workspace"] == 1


def test_emergency_stop_holds_the_pose_it_found_until_released():
    safety = layer()
    safety.estop.press("test")
    present = np.full(N, 7, np.float32)  # where the arm was when the stop came
    for cmd, drifted in ((np.full(N, 50, np.float32), present), (np.full(N, -50, np.float32), present + 1)):
        np.testing.assert_array_equal(safety(cmd, drifted), present)
    assert safety.counts["estop_hold"] == 2 and safety.estop.presses == 1
    safety.estop.release()
    np.testing.assert_array_equal(safety(np.ones(N, np.float32), present), np.ones(N, np.float32))


def test_bad_limits_are_refused():
    with pytest.raises(ValueError, match="do not form a range"):
        SafetyLimits(HIGH, LOW)
    with pytest.raises(ValueError, match="max_step"):
        SafetyLimits(LOW, HIGH, max_step=np.zeros(N, np.float32))
    with pytest.raises(ValueError, match="kinematics"):
        SafetyLayer(SafetyLimits(LOW, HIGH, workspace_low=np.zeros(3), workspace_high=np.ones(3)))


def test_watchdog_fires_once_per_silence_and_not_while_kicked_or_paused():
    fired = threading.Event()
    count = []
    dog = Watchdog(0.05, lambda: (count.append(1), fired.set()))
    dog.start()
    try:
        dog.pause()
        assert not fired.wait(0.2)  # paused: nothing is due
        dog.kick()
        assert fired.wait(5)
        assert not threading.Event().wait(0.2) and len(count) == 1  # once per silence
        dog.kick()
        wait_until(lambda: len(count) == 2, 5, "a second expiry after a new kick")
    finally:
        dog.stop()


def test_arm_guard_runs_make_safe_exactly_once():
    calls = []
    guard = ArmGuard(lambda: calls.append(1))
    guard.close()
    guard.close()
    assert calls == [1]


def test_emergency_stop_is_thread_safe_and_latched():
    stop = EmergencyStop()
    threads = [threading.Thread(target=stop.press, args=(f"t{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert stop.pressed and stop.presses == 1


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("hardware.safety.max_step=-1", "hardware.safety.max_step"),
        ("hardware.safety.watchdog_s=0", "hardware.safety.watchdog_s"),
        ("hardware.safety.joint_low=[0,0]", "hardware.safety.joint_high"),
        ("hardware.safety.workspace_low=[0,0]", "hardware.safety.workspace_low"),
        ("profile.samples=0", "profile.samples"),
    ],
)
def test_bad_hardware_config_names_the_field(override, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        to_config(compose_config([override]))
