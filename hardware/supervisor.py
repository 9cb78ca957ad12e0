"""A process apart from the actor that holds the arm when the actor stops: SIGKILL, OOM, a hung bus.

Why a process: the actor's :class:`~robotrl.hardware.safety.Watchdog` and
:class:`~robotrl.hardware.safety.ArmGuard` live inside the actor, so a SIGKILL or the OOM
killer takes them with it, and a bus call that never returns holds the bus lock they need.
The servos cannot help: the SO-101's Feetech STS3215 has no communication timeout (its
control table, ``lerobot.motors.feetech.tables``, has no watchdog register), so a servo keeps
its last goal for ever when its master goes quiet.

Who owns the serial port: the actor, alone, while it is healthy; the supervisor holds no
handle on it. The actor writes :data:`HEARTBEAT` to the supervisor's stdin while no bus call
has hung (:meth:`~robotrl.hardware.env.LerobotRobotEnv.responsive`), and :data:`GOODBYE`
once it has left the arm safe itself. End of file without a goodbye (the kernel closed the
dead actor's pipe, and with it its serial port) or a missed deadline (hung) makes the
supervisor SIGKILL a hung actor and wait for that end of file, and only then open the port and hold:
goal := present position, or torque off with ``hardware.safety.disable_torque_on_stop``. So
two processes never write to the bus at once (on a real port their packets and replies would
interleave; the fake one, :mod:`~robotrl.hardware.fake_pty`, behaves the same).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

from robotrl.config.hardware import HardwareConfig, SafetyConfig

log = logging.getLogger(__name__)

HEARTBEAT, GOODBYE, READY = b"h", b"q", b"ready\n"
FENCE_TIMEOUT_S = 5.0
"""How long the supervisor waits for a killed actor's pipe (and port) to close before holding."""
HOLD_TRIES = 3


class HeartbeatDeadline:
    """When the next heartbeat is due; the clock is injected so the deadline logic is testable."""

    def __init__(self, deadline_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if deadline_s <= 0:
            raise ValueError(f"supervisor deadline must be > 0, got {deadline_s}")
        self.deadline_s = deadline_s
        self._clock = clock
        self._last = clock()

    def beat(self) -> None:
        self._last = self._clock()

    def remaining(self) -> float:
        """Seconds until the deadline (negative once missed)."""
        return self._last + self.deadline_s - self._clock()


def watch(fd: int, deadline: HeartbeatDeadline) -> Literal["goodbye", "died", "hung"]:
    """Read heartbeats from ``fd`` until the actor says goodbye, dies (end of file: the kernel
    closed its pipe) or misses the deadline (hung)."""
    while True:
        ready, _, _ = select.select([fd], [], [], max(deadline.remaining(), 0.0))
        if not ready:
            if deadline.remaining() < 0:
                return "hung"
            continue
        data = os.read(fd, 4096)
        if not data:
            return "died"
        if GOODBYE in data:
            return "goodbye"
        deadline.beat()


def fence_actor(pid: int, fd: int, timeout_s: float = FENCE_TIMEOUT_S) -> bool:
    """SIGKILL a hung actor and wait for its end of the pipe to close: the kernel has then closed
    its serial port as well. False if it did not close in time (a forked child still holds it).
    Only while the pipe is open, so the pid is still the actor's and cannot have been reused."""
    with contextlib.suppress(ProcessLookupError):  # it died a moment ago: its pipe closes below
        os.kill(pid, signal.SIGKILL)
    end = time.monotonic() + timeout_s
    while (left := end - time.monotonic()) > 0:
        ready, _, _ = select.select([fd], [], [], left)
        if ready and not os.read(fd, 4096):
            return True
    return False


def hold_arm(robot: Any, disable_torque: bool) -> str:
    """Open the robot's bus, hold every joint where it is (or drop torque), close the bus."""
    bus = robot.bus
    bus.connect(handshake=False)  # the actor used this bus a moment ago; the reads below retry
    try:
        if disable_torque:
            bus.disable_torque(num_retry=5)
            return "torque off"
        present = bus.sync_read("Present_Position", normalize=False, num_retry=5)
        bus.sync_write("Goal_Position", present, normalize=False, num_retry=5)
        return f"holding at {present}"
    finally:
        bus.disconnect(disable_torque=False)


def supervise(fd: int, actor_pid: int, hw: HardwareConfig, deadline: HeartbeatDeadline) -> int:
    """Watch the actor; on a failure fence it and hold the arm. The exit status says which."""
    from robotrl.hardware.factory import make_robot

    robot = make_robot(hw)  # built (not connected) before the first heartbeat: holding is quick
    sys.stdout.buffer.write(READY)
    sys.stdout.flush()
    deadline.beat()  # the deadline runs from now, not from the seconds spent importing lerobot
    verdict = watch(fd, deadline)
    if verdict == "goodbye":
        return 0
    if verdict == "died":
        log.error("arm supervisor: actor %d died without a goodbye; holding the arm", actor_pid)
    else:
        log.error(
            "arm supervisor: no heartbeat from actor %d for %.2f s (hung); killing it, then holding the arm",
            actor_pid,
            deadline.deadline_s,
        )
        if not fence_actor(actor_pid, fd):
            log.error("arm supervisor: actor %d's pipe still open after %.0f s", actor_pid, FENCE_TIMEOUT_S)
    for attempt in range(1, HOLD_TRIES + 1):
        try:
            state = hold_arm(robot, hw.safety.disable_torque_on_stop)
        except (ConnectionError, OSError, RuntimeError) as exc:
            log.error("arm supervisor: hold %d/%d failed: %r", attempt, HOLD_TRIES, exc, exc_info=True)
            continue
        log.error("arm supervisor: arm left safe (%s)", state)
        return 1
    return 2


def hardware_from_json(text: str) -> HardwareConfig:
    fields = json.loads(text)
    safety = SafetyConfig(**fields.pop("safety"))
    return HardwareConfig(**fields, safety=safety)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--actor-pid", type=int, required=True)
    parser.add_argument("--deadline-s", type=float, required=True)
    parser.add_argument("--hardware", required=True, help="the actor's hardware config, as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s arm-supervisor %(levelname)s %(message)s")
    hw = hardware_from_json(args.hardware)
    return supervise(sys.stdin.fileno(), args.actor_pid, hw, HeartbeatDeadline(args.deadline_s))


class SupervisorLink:
    """The actor's side: starts the supervisor, waits until it is ready, then heartbeats from a
    thread while ``responsive(stall_s)`` says no bus call has hung. ``hardware.safety.supervisor_s``
    bounds how long a dead or hung actor leaves the arm unheld."""

    def __init__(
        self,
        hw: HardwareConfig,
        responsive: Callable[[float], bool],
        start_timeout_s: float = 60.0,
    ) -> None:
        self.within_s = hw.safety.supervisor_s
        self._responsive = responsive
        hw = dataclasses.replace(hw, cameras={})  # holding needs the bus only
        self.process = subprocess.Popen(
            [
                *(sys.executable, "-m", "robotrl.hardware.supervisor", "--actor-pid", str(os.getpid())),
                *("--deadline-s", repr(self.within_s / 2), "--hardware", json.dumps(dataclasses.asdict(hw))),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,  # a Ctrl-C or a signal to the actor's group leaves it running
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._pipe, self._ready = self.process.stdin, self.process.stdout
        ready, _, _ = select.select([self._ready], [], [], start_timeout_s)
        if not ready or self._ready.readline() != READY:
            self.process.kill()
            status = self.process.wait()
            raise RuntimeError(
                f"the arm supervisor did not start within {start_timeout_s:.0f} s (exit status {status}, "
                "its log is above); refusing to drive an unsupervised arm "
                "(hardware.safety.supervisor_s=0 turns it off)"
            )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="robotrl-arm-heartbeat", daemon=True)
        self._thread.start()
        log.info(
            "arm supervisor %d holds the arm within %.2f s of a failure", self.process.pid, self.within_s
        )

    def _beat(self) -> None:
        """Beat every eighth of ``within_s`` unless a bus call has run for a quarter of it; with the
        supervisor's deadline of half, a hang is held within about seven eighths."""
        period, stall_s = self.within_s / 8, self.within_s / 4
        while not self._stop.wait(period):
            if not self._responsive(stall_s):
                continue  # a hung bus call: let the deadline pass
            try:
                self._pipe.write(HEARTBEAT)
                self._pipe.flush()
            except (BrokenPipeError, ValueError):
                log.error("arm supervisor %d is gone: the arm is unsupervised", self.process.pid)
                return

    def goodbye(self) -> None:
        """The actor has left the arm safe itself: the supervisor ends without touching it."""
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            self._pipe.write(GOODBYE)
            self._pipe.close()
        except (BrokenPipeError, ValueError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._ready.close()


if __name__ == "__main__":
    sys.exit(main())
