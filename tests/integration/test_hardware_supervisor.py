"""The arm supervisor, a process apart from the actor, holds the arm when the actor stops.

The servos are a fake SO-101 chain served on a pty (:mod:`robotrl.hardware.fake_pty`) in this
test's process; the actor (``arm_actor_process.py``, the real factory and env) and the
supervisor it starts are separate processes that open that pty through lerobot's own serial
port handler, as they would open a real arm's USB adapter.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from robotrl.hardware.fake_pty import ServoPty
from robotrl.hardware.fake_serial import FakeServoChain, calibrated_chain
from waiting import pid_alive, wait_until

SO101_JOINTS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]
ACTOR = Path(__file__).with_name("arm_actor_process.py")
SUPERVISOR_S = 1.0
SLACK_S = 4.0
"""Added to every wait: this machine is shared and loaded; the measured figure is printed."""
HELD_STEPS = 12
"""|goal - present| within which a joint counts as held where it is (the actor's goals lead by hundreds)."""


def exited(pid: int) -> bool:
    """The process is gone, or a zombie nobody has reaped yet (the supervisor outlives its parent,
    the actor, so whoever adopts it reaps it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state == "Z" or not pid_alive(pid)


class ActorProcess:
    """``arm_actor_process.py`` on the served arm; a thread keeps the number of its last tick."""

    def __init__(self, port: str, tmp_path: Path, *mode: str) -> None:
        argv = [sys.executable, str(ACTOR), port, str(tmp_path / "cal"), str(SUPERVISOR_S), *mode]
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        self.ticks = 0
        self.supervisor_pid = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("tick "):
                self.ticks = int(line.split()[1])
            elif line.startswith("supervisor "):
                self.supervisor_pid = int(line.split()[1])

    def stop(self) -> None:
        """Kill the actor if it still runs, and wait for its supervisor to finish (so it never
        touches the next test's pty, which may reuse this one's path)."""
        self.process.kill()
        self.process.wait()
        if self.supervisor_pid:
            wait_until(lambda: exited(self.supervisor_pid), 30, "the supervisor exiting")

    def alive(self) -> None:
        if self.process.poll() is not None and self.ticks == 0:
            raise AssertionError(f"the actor exited with {self.process.returncode} before driving the arm")


@pytest.fixture
def served_arm() -> Iterator[tuple[FakeServoChain, ServoPty]]:
    chain, _ = calibrated_chain(SO101_JOINTS, list(range(1, 7)), latency_s=(0.0, 0.0))  # the pty adds its own
    for servo in chain.servos.values():
        servo.speed = 300.0  # slower than the actor's goals move: the goal leads the joint
    server = ServoPty(chain)
    yield chain, server
    server.close()


def held_since(chain: FakeServoChain, since: float) -> bool:
    """Every servo got a goal after ``since`` and that goal is where the joint is."""
    snapshot = chain.snapshot()
    return all(
        servo.goal_write_times and servo.goal_write_times[-1] > since for servo in chain.servos.values()
    ) and all(abs(s["goal"] - s["present"]) <= HELD_STEPS and s["torque"] for s in snapshot.values())


def leading(chain: FakeServoChain) -> bool:
    """The arm is moving: some goal is far from where its joint is."""
    return any(abs(s["goal"] - s["present"]) > 10 * HELD_STEPS for s in chain.snapshot().values())


def limp(chain: FakeServoChain) -> bool:
    """Every servo's torque is off: ``disable_torque_on_stop``'s safe state (the actor never drops it
    while it drives)."""
    return not any(s["torque"] for s in chain.snapshot().values())


@pytest.mark.timeout(300)
@pytest.mark.parametrize("torque_off", [False, True], ids=["holding", "limp"])
def test_the_supervisor_holds_the_arm_when_the_actor_is_sigkilled(served_arm, tmp_path, torque_off):
    chain, server = served_arm
    actor = ActorProcess(server.path, tmp_path, "run", "-1", *(["limp"] if torque_off else []))
    try:
        wait_until(lambda: actor.ticks >= 10, 120, "the actor driving the arm", on_wait=actor.alive)
        assert leading(chain) and all(s["torque"] for s in chain.snapshot().values())
        killed_at = time.monotonic()
        os.kill(actor.process.pid, signal.SIGKILL)
        left_safe = (lambda: limp(chain)) if torque_off else (lambda: held_since(chain, killed_at))
        wait_until(left_safe, SUPERVISOR_S + SLACK_S, "the supervisor leaving the arm safe")
        print(f"safe {(time.monotonic() - killed_at) * 1e3:.0f} ms after the SIGKILL")
    finally:
        actor.stop()


@pytest.mark.timeout(300)
def test_the_supervisor_fences_an_actor_whose_bus_read_hangs_and_holds_the_arm(served_arm, tmp_path):
    chain, server = served_arm
    actor = ActorProcess(server.path, tmp_path, "hang", "10")
    try:
        wait_until(lambda: actor.ticks >= 10, 120, "the actor driving the arm", on_wait=actor.alive)
        hung_at = time.monotonic()  # its next read never returns; its heartbeat thread still runs
        assert leading(chain)
        wait_until(
            lambda: actor.process.poll() is not None,
            SUPERVISOR_S + SLACK_S,
            "the supervisor fencing the actor",
        )
        assert actor.process.returncode == -signal.SIGKILL
        wait_until(lambda: held_since(chain, hung_at), SUPERVISOR_S + SLACK_S, "the supervisor's hold")
        print(f"held {time.monotonic() - hung_at:.2f} s after the hang (supervisor_s {SUPERVISOR_S} s)")
    finally:
        actor.stop()


@pytest.mark.timeout(300)
def test_an_actor_that_stops_cleanly_dismisses_the_supervisor_which_never_touches_the_bus(
    served_arm, tmp_path
):
    chain, server = served_arm
    actor = ActorProcess(server.path, tmp_path, "close", "10")
    try:
        assert actor.process.wait(timeout=120) == 0
        assert actor.supervisor_pid > 0
        writes = [len(servo.goal_writes) for servo in chain.servos.values()]
        wait_until(lambda: exited(actor.supervisor_pid), SLACK_S, "the dismissed supervisor exiting")
        assert [len(servo.goal_writes) for servo in chain.servos.values()] == writes
        assert all(s["torque"] for s in chain.snapshot().values())  # the actor's own hold stands
    finally:
        actor.stop()
