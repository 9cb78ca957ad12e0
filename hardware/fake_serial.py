"""A chain of Feetech STS3215 servos behind a fake serial port, for tests and dry runs.

Only the serial port is faked: lerobot's real robot class, its real ``FeetechMotorsBus``
and the real Feetech SDK build and parse every packet, so the fake is exercised by the
same bytes a real arm receives. Each servo keeps the STS3215 control table (model
number, firmware, calibration, torque, goal and present position) and moves toward its
goal at a bounded speed while its torque is on. Transactions take 1-3 ms, and a reply
can be corrupted on the wire, which the SDK reports as ``COMM_RX_CORRUPT`` and lerobot
turns into the ``ConnectionError`` a real noisy bus raises.
"""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MODEL_NUMBER_STS3215 = 777
RESOLUTION = 4096
# Control table addresses of the STS/SMS series (lerobot.motors.feetech.tables).
ADDR_FIRMWARE_MAJOR, ADDR_FIRMWARE_MINOR, ADDR_MODEL = 0, 1, 3
ADDR_MIN_LIMIT, ADDR_MAX_LIMIT, ADDR_HOMING = 9, 11, 31
ADDR_TORQUE, ADDR_GOAL, ADDR_LOCK, ADDR_PRESENT = 40, 42, 55, 56
ADDR_PRESENT_SPEED = 58
INST_PING, INST_READ, INST_WRITE, INST_SYNC_READ, INST_SYNC_WRITE = 0x01, 0x02, 0x03, 0x82, 0x83
BROADCAST_ID = 0xFE


def _checksum(body: list[int]) -> int:
    return ~sum(body) & 0xFF


def _sign_magnitude(value: int, sign_bit: int) -> int:
    """Feetech's signed encoding (bit ``sign_bit`` is the sign) of a 16-bit register."""
    return (abs(value) | (1 << sign_bit)) if value < 0 else value


def _decode_sign_magnitude(raw: int, sign_bit: int) -> int:
    magnitude = raw & ((1 << sign_bit) - 1)
    return -magnitude if raw & (1 << sign_bit) else magnitude


@dataclass
class FakeServo:
    """One STS3215: a control table and a joint that moves toward its goal while torque is on."""

    servo_id: int
    actual: float = RESOLUTION / 2
    """True encoder position (0..4095), before the homing offset."""
    speed: float = 3000.0
    """Encoder steps per second the servo moves toward its goal at (about 260 deg/s)."""
    memory: bytearray = field(default_factory=lambda: bytearray(256))
    last_update: float = field(default_factory=time.monotonic)
    goal_writes: list[int] = field(default_factory=list)
    """Every Goal_Position value written, in order (what reached the motor)."""
    goal_write_times: list[float] = field(default_factory=list)
    """When each of ``goal_writes`` arrived (``time.monotonic``)."""

    def __post_init__(self) -> None:
        self._put(ADDR_MODEL, 2, MODEL_NUMBER_STS3215)
        self._put(ADDR_FIRMWARE_MAJOR, 1, 3)
        self._put(ADDR_FIRMWARE_MINOR, 1, 10)
        self._put(ADDR_MIN_LIMIT, 2, 0)
        self._put(ADDR_MAX_LIMIT, 2, RESOLUTION - 1)
        self._put(ADDR_GOAL, 2, int(self.actual))

    # -- registers --------------------------------------------------------------------

    def _put(self, addr: int, length: int, value: int) -> None:
        self.memory[addr : addr + length] = int(value).to_bytes(length, "little")

    def _get(self, addr: int, length: int) -> int:
        return int.from_bytes(self.memory[addr : addr + length], "little")

    @property
    def homing_offset(self) -> int:
        return _decode_sign_magnitude(self._get(ADDR_HOMING, 2), 11)

    @property
    def torque_enabled(self) -> bool:
        return self.memory[ADDR_TORQUE] == 1

    @property
    def present(self) -> int:
        """Present_Position as the servo reports it (the homing offset applied)."""
        return round(self.actual) - self.homing_offset

    @property
    def goal(self) -> int:
        return _decode_sign_magnitude(self._get(ADDR_GOAL, 2), 15)

    def _advance(self, now: float) -> None:
        """Move toward the goal for the time since the last access (position mode)."""
        dt, self.last_update = now - self.last_update, now
        if not self.torque_enabled:
            return
        lo, hi = self._get(ADDR_MIN_LIMIT, 2), self._get(ADDR_MAX_LIMIT, 2)
        target = float(np.clip(self.goal, lo, hi)) + self.homing_offset
        step = self.speed * dt
        self.actual += float(np.clip(target - self.actual, -step, step))

    def read(self, addr: int, length: int, now: float) -> bytes:
        self._advance(now)
        self._put(ADDR_PRESENT, 2, _sign_magnitude(self.present, 15))
        return bytes(self.memory[addr : addr + length])

    def write(self, addr: int, data: bytes, now: float) -> None:
        self._advance(now)
        if addr <= ADDR_MODEL < addr + len(data):
            return  # read-only
        self.memory[addr : addr + len(data)] = data
        if addr == ADDR_GOAL and len(data) >= 2:
            self.goal_writes.append(self.goal)
            self.goal_write_times.append(now)


class FakeServoChain:
    """Servos sharing one half-duplex bus, answering instruction packets byte for byte.

    ``latency_s`` bounds the time a transaction takes; ``corrupt_prob`` is the chance
    that a reply arrives with a bad checksum; ``fail_next_reads`` corrupts the next n
    replies for sure (tests).
    """

    def __init__(
        self,
        ids: list[int],
        latency_s: tuple[float, float] = (0.001, 0.003),
        corrupt_prob: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.servos = {i: FakeServo(i) for i in ids}
        self.latency_s = latency_s
        self.corrupt_prob = corrupt_prob
        self.fail_next_reads = 0
        self.corrupted_replies = 0
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()
        self.is_open = False
        self.on_close: Callable[[FakeServoChain], None] | None = None
        """Called when lerobot closes the port (a test records the state the arm was left in)."""

    def snapshot(self) -> dict[int, dict[str, Any]]:
        """Torque, goal and present position of every servo, now."""
        with self._lock:
            now = time.monotonic()
            out = {}
            for sid, servo in self.servos.items():
                servo._advance(now)
                out[sid] = {"torque": servo.torque_enabled, "goal": servo.goal, "present": servo.present}
            return out

    def handle(self, packet: bytes) -> bytes:
        """The bytes the servos put on the bus in answer to one instruction packet."""
        with self._lock:
            lo, hi = self.latency_s
            time.sleep(float(self._rng.uniform(lo, hi)))
            now = time.monotonic()
            if len(packet) < 6 or packet[0] != 0xFF or packet[1] != 0xFF:
                return b""
            sid, length, inst = packet[2], packet[3], packet[4]
            params = packet[5 : 3 + length]
            if packet[3 + length] != _checksum(list(packet[2 : 3 + length])):
                return b""  # a servo ignores a packet whose checksum is wrong
            replies: list[bytes] = []
            if inst == INST_PING:
                targets = list(self.servos) if sid == BROADCAST_ID else [sid]
                replies = [self._status(t, b"") for t in targets if t in self.servos]
            elif inst == INST_READ and sid in self.servos:
                replies = [self._status(sid, self.servos[sid].read(params[0], params[1], now))]
            elif inst == INST_WRITE and sid in self.servos:
                self.servos[sid].write(params[0], bytes(params[1:]), now)
                replies = [self._status(sid, b"")]
            elif inst == INST_SYNC_READ:
                addr, n = params[0], params[1]
                replies = [
                    self._status(t, self.servos[t].read(addr, n, now)) for t in params[2:] if t in self.servos
                ]
            elif inst == INST_SYNC_WRITE:
                addr, n = params[0], params[1]
                body = params[2:]
                for k in range(0, len(body), n + 1):
                    if body[k] in self.servos:
                        self.servos[body[k]].write(addr, bytes(body[k + 1 : k + 1 + n]), now)
            if replies and inst in (INST_READ, INST_SYNC_READ) and self._corrupt():
                self.corrupted_replies += 1
                last = bytearray(replies[-1])
                last[-1] ^= 0x5A  # noise on the line: the checksum no longer matches
                replies[-1] = bytes(last)
            return b"".join(replies)

    def _corrupt(self) -> bool:
        if self.fail_next_reads > 0:
            self.fail_next_reads -= 1
            return True
        return bool(self.corrupt_prob > 0 and self._rng.random() < self.corrupt_prob)

    @staticmethod
    def _status(sid: int, data: bytes) -> bytes:
        body = [sid, len(data) + 2, 0, *data]
        return bytes([0xFF, 0xFF, *body, _checksum(body)])


class FakeSerial:
    """The slice of ``serial.Serial`` the Feetech SDK uses, wired to a :class:`FakeServoChain`."""

    def __init__(self, chain: FakeServoChain) -> None:
        self.chain = chain
        self._rx = bytearray()

    @property
    def in_waiting(self) -> int:
        return len(self._rx)

    def write(self, packet: Any) -> int:
        data = bytes(packet)
        self._rx += self.chain.handle(data)
        return len(data)

    def read(self, length: int) -> bytes:
        out = bytes(self._rx[:length])
        del self._rx[:length]
        return out

    def flush(self) -> None:
        """Nothing buffered on the way out."""

    def reset_input_buffer(self) -> None:
        self._rx.clear()

    def close(self) -> None:
        self._rx.clear()
        self.chain.is_open = False
        if self.chain.on_close is not None:
            self.chain.on_close(self.chain)


def attach_fake_servos(bus: Any, chain: FakeServoChain) -> None:
    """Make a lerobot Feetech bus open ``chain`` instead of a serial device (before ``connect``)."""
    handler = bus.port_handler

    def setup_port(self: Any, cflag_baud: int) -> bool:
        del cflag_baud
        self.ser = FakeSerial(chain)
        self.is_open = chain.is_open = True
        self.tx_time_per_byte = (1000.0 / self.baudrate) * 10.0
        return True

    handler.setupPort = types.MethodType(setup_port, handler)


def fake_calibration(names: list[str], ids: list[int]) -> dict[str, Any]:
    """The lerobot calibration (``MotorCalibration`` per joint) that :func:`calibrated_chain`'s
    servos store; a process that opens a served chain (:mod:`~robotrl.hardware.fake_pty`) uses it."""
    from lerobot.motors import MotorCalibration

    calibration = {}
    for name, sid in zip(names, ids, strict=True):
        lo, hi = (0, RESOLUTION - 1) if name == "wrist_roll" else (1024, 3072)
        calibration[name] = MotorCalibration(
            id=sid, drive_mode=0, homing_offset=0, range_min=lo, range_max=hi
        )
    return calibration


def calibrated_chain(
    names: list[str], ids: list[int], **kwargs: Any
) -> tuple[FakeServoChain, dict[str, Any]]:
    """A chain whose servos already hold a calibration, and that calibration for lerobot.

    The returned calibration matches what the servos store, so lerobot's ``connect`` finds
    the arm calibrated and asks nothing.
    """
    chain = FakeServoChain(ids, **kwargs)
    calibration = fake_calibration(names, ids)
    for sid, cal in zip(ids, calibration.values(), strict=True):
        servo = chain.servos[sid]
        servo._put(ADDR_MIN_LIMIT, 2, cal.range_min)
        servo._put(ADDR_MAX_LIMIT, 2, cal.range_max)
        servo._put(ADDR_GOAL, 2, (cal.range_min + cal.range_max) // 2)
        servo.actual = float((cal.range_min + cal.range_max) // 2)
    return chain, calibration
