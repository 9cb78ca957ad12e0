"""The arm supervisor's deadline logic (injected clock), its pipe protocol and the fake pty's framing."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os

import pytest
from robotrl.hardware.fake_pty import take_packets
from robotrl.hardware.supervisor import GOODBYE, HEARTBEAT, HeartbeatDeadline, hardware_from_json, watch

from robotrl.config.hardware import HardwareConfig


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_deadline_runs_from_the_last_heartbeat():
    clock = FakeClock()
    deadline = HeartbeatDeadline(0.5, clock)
    clock.now += 0.4
    assert deadline.remaining() == pytest.approx(0.1)
    deadline.beat()
    clock.now += 0.3
    assert deadline.remaining() == pytest.approx(0.2)
    clock.now += 0.3
    assert deadline.remaining() < 0
    with pytest.raises(ValueError, match="deadline must be > 0"):
        HeartbeatDeadline(0.0, clock)


@pytest.fixture
def pipe():
    read_fd, write_fd = os.pipe()
    yield read_fd, write_fd
    os.close(read_fd)
    with contextlib.suppress(OSError):  # a test closed it: that is the actor dying
        os.close(write_fd)


def test_a_goodbye_ends_the_watch_without_a_hold(pipe):
    read_fd, write_fd = pipe
    os.write(write_fd, HEARTBEAT * 3 + GOODBYE)
    assert watch(read_fd, HeartbeatDeadline(5.0)) == "goodbye"


def test_a_closed_pipe_without_a_goodbye_means_the_actor_died(pipe):
    read_fd, write_fd = pipe
    os.write(write_fd, HEARTBEAT)
    os.close(write_fd)
    assert watch(read_fd, HeartbeatDeadline(5.0)) == "died"


def test_a_missed_deadline_means_the_actor_hung(pipe):
    read_fd, _ = pipe
    clock = FakeClock()
    deadline = HeartbeatDeadline(0.5, clock)
    clock.now += 0.6  # no heartbeat came: the injected clock is past the deadline
    assert watch(read_fd, deadline) == "hung"


def test_heartbeats_keep_the_deadline_ahead(pipe):
    read_fd, write_fd = pipe
    clock = FakeClock()
    deadline = HeartbeatDeadline(0.5, clock)
    clock.now += 0.45
    os.write(write_fd, HEARTBEAT)
    os.close(write_fd)
    assert watch(read_fd, deadline) == "died"  # read the beat, then the end of file
    assert deadline.remaining() == pytest.approx(0.5)


def packet(servo_id: int, body: bytes) -> bytes:
    frame = [servo_id, len(body) + 1, *body]
    return bytes([0xFF, 0xFF, *frame, ~sum(frame) & 0xFF])


def test_the_pty_splits_the_stream_into_packets_and_skips_noise():
    first, second = packet(1, b"\x02\x38\x02"), packet(2, b"\x01")
    buffer = bytearray(b"\x00\x13" + first + b"\xff\xff\x00" + second + second[:3])
    assert list(take_packets(buffer)) == [first, second]
    assert buffer == bytearray(second[:3])  # half a packet waits for the rest
    buffer += second[3:]
    assert list(take_packets(buffer)) == [second] and not buffer


def test_the_hardware_config_travels_to_the_supervisor_as_json():
    hw = HardwareConfig(robot_type="so101_follower", robot_port="/dev/ttyACM3")
    hw.safety.disable_torque_on_stop = True
    assert hardware_from_json(json.dumps(dataclasses.asdict(hw))) == hw
