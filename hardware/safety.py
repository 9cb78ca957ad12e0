"""Everything between a commanded action and the motors of a real arm.

:class:`SafetyLayer` filters every command: joint limits, a maximum change per tick,
a cap on the measured joint speed, an optional workspace box for the gripper, and a
latched emergency stop. :class:`Watchdog` holds the arm when no command arrives in
time, whatever the control loop is doing. :class:`ArmGuard` leaves the arm safe when
the actor ends in any way (normal exit, exception, SIGTERM, interpreter exit). Every
clamp, hold and stop is counted and logged.
"""

from __future__ import annotations

import atexit
import logging
import signal
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

import numpy as np

from robotrl.core.types import FloatArray

log = logging.getLogger(__name__)

Kinematics = Callable[[FloatArray], FloatArray]
"""Joint positions (action units) -> gripper position (x, y, z) in metres, robot base frame."""


@dataclass(frozen=True)
class SafetyLimits:
    """Limits in action units (lerobot's: degrees, gripper 0..100), one entry per joint."""

    low: FloatArray
    high: FloatArray
    max_step: FloatArray | None = None
    """Largest change of a joint's command from one tick to the next."""
    max_velocity: FloatArray | None = None
    """Measured joint speed (units/s) above which the arm is held where it is."""
    workspace_low: FloatArray | None = None
    """Lower corner of the box the gripper must stay in (needs kinematics)."""
    workspace_high: FloatArray | None = None

    def __post_init__(self) -> None:
        if self.low.shape != self.high.shape or np.any(self.low > self.high):
            raise ValueError(f"safety limits: low {self.low} and high {self.high} do not form a range")
        for name in ("max_step", "max_velocity"):
            value = getattr(self, name)
            if value is not None and (value.shape != self.low.shape or np.any(value <= 0)):
                raise ValueError(f"safety limits: {name} needs {self.low.shape[0]} positive entries")
        if (self.workspace_low is None) != (self.workspace_high is None):
            raise ValueError("safety limits: a workspace box needs both corners")


class EmergencyStop:
    """A latched stop: once pressed, every command holds until :meth:`release`. Thread-safe."""

    def __init__(self) -> None:
        self._pressed = threading.Event()
        self._lock = threading.Lock()
        self.reason = ""
        self.presses = 0

    def press(self, reason: str) -> None:
        with self._lock:
            if not self._pressed.is_set():
                self.presses += 1
                self.reason = reason
                log.error("EMERGENCY STOP: %s", reason)
            self._pressed.set()

    @property
    def pressed(self) -> bool:
        return self._pressed.is_set()

    def release(self) -> None:
        """Only by an operator, between episodes."""
        if self._pressed.is_set():
            log.warning("emergency stop released (was: %s)", self.reason)
        self._pressed.clear()


class SafetyLayer:
    """Filters every command before it reaches the motors; counts and logs what it changed.

    ``counts`` keys: ``joint_limit``, ``max_step``, ``overspeed``, ``workspace``,
    ``non_finite``, ``estop_hold``: ticks on which that rule changed the command.
    """

    def __init__(
        self, limits: SafetyLimits, estop: EmergencyStop | None = None, kinematics: Kinematics | None = None
    ) -> None:
        if limits.workspace_low is not None and kinematics is None:
            raise ValueError("safety: a workspace box needs the arm's kinematics")
        self.limits = limits
        self.estop = estop or EmergencyStop()
        self.kinematics = kinematics
        self.counts: Counter[str] = Counter()
        self._last: FloatArray | None = None
        self._estop_hold: FloatArray | None = None

    def reset(self, present: FloatArray) -> None:
        """Start from where the arm is (the first tick's step is measured from here)."""
        present = np.asarray(present, np.float32)
        if not np.all(np.isfinite(present)):
            raise ValueError(f"safety: cannot start from a non-finite arm position {present.tolist()}")
        self._last = present.copy()

    @property
    def last_command(self) -> FloatArray | None:
        """The last command returned (or the reset position): finite once reset."""
        return None if self._last is None else self._last.copy()

    def _count(self, rule: str, detail: str) -> None:
        self.counts[rule] += 1
        level = logging.WARNING if self.counts[rule] == 1 or self.counts[rule] % 100 == 0 else logging.DEBUG
        log.log(level, "safety %s (%d so far): %s", rule, self.counts[rule], detail)

    def __call__(
        self, action: FloatArray, present: FloatArray, velocity: FloatArray | None = None
    ) -> FloatArray:
        """The command to send for ``action`` given the arm's ``present`` position and velocity."""
        lim = self.limits
        present = np.asarray(present, np.float32)
        last = present if self._last is None else self._last
        if self.estop.pressed:
            if self._estop_hold is None:
                self._estop_hold = present.copy()  # hold where the arm was when the stop came
            self._count("estop_hold", self.estop.reason)
            return self._sent(self._estop_hold)
        self._estop_hold = None
        cmd = np.asarray(action, np.float32)
        if not np.all(np.isfinite(cmd)):
            self._count("non_finite", f"action {cmd}")
            return self._sent(last)
        clipped = np.clip(cmd, lim.low, lim.high)
        if not np.array_equal(clipped, cmd):
            self._count("joint_limit", f"action {cmd} outside [{lim.low}, {lim.high}]")
        cmd = clipped
        if lim.max_step is not None:
            stepped = np.clip(cmd, last - lim.max_step, last + lim.max_step)
            if not np.array_equal(stepped, cmd):
                self._count("max_step", f"change {cmd - last} over {lim.max_step}")
            cmd = stepped
        if lim.max_velocity is not None and velocity is not None:
            fast = np.abs(np.asarray(velocity, np.float32)) > lim.max_velocity
            if np.any(fast):
                self._count("overspeed", f"joint speeds {velocity} over {lim.max_velocity}")
                cmd = np.clip(present, lim.low, lim.high)
        if self.kinematics is not None and lim.workspace_low is not None and lim.workspace_high is not None:
            xyz = self.kinematics(cmd)
            if np.any(xyz < lim.workspace_low) or np.any(xyz > lim.workspace_high):
                self._count("workspace", f"gripper at {xyz} outside the box")
                cmd = last  # the last command was inside; stay there
        if not np.all(np.isfinite(cmd)):  # a NaN position or velocity got through the rules above
            self._count("non_finite", f"command {cmd} from position {present}")
            cmd = last
        return self._sent(cmd)

    def _sent(self, cmd: FloatArray) -> FloatArray:
        out: FloatArray = np.asarray(cmd, np.float32).copy()
        self._last = out
        return out


class Watchdog:
    """Calls ``on_expire`` once when :meth:`kick` was not called for ``timeout_s``.

    Runs in its own thread, so it acts when the control loop is stuck (a long garbage
    collection, a hung inference hand-off, a crash in another thread). Kicking after an
    expiry re-arms it.
    """

    def __init__(self, timeout_s: float, on_expire: Callable[[], None]) -> None:
        if timeout_s <= 0:
            raise ValueError(f"watchdog timeout must be > 0, got {timeout_s}")
        self.timeout_s = timeout_s
        self._on_expire = on_expire
        self._kicked = threading.Event()
        self._stop = threading.Event()
        self._armed = False
        self.expiries = 0
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="robotrl-watchdog", daemon=True)
        self._thread.start()

    def kick(self) -> None:
        self._armed = True
        self._kicked.set()

    def pause(self) -> None:
        """Between episodes (reset, operator prompts) no command is due."""
        self._armed = False

    def _run(self) -> None:
        while not self._stop.is_set():
            kicked = self._kicked.wait(self.timeout_s)
            self._kicked.clear()
            if kicked or not self._armed or self._stop.is_set():
                continue
            self._armed = False  # once per silence
            self.expiries += 1
            log.error("watchdog: no command for %.0f ms, holding the arm", self.timeout_s * 1e3)
            try:
                self._on_expire()
            except Exception:  # the watchdog must survive a failing bus
                log.exception("watchdog: holding the arm failed")

    def stop(self) -> None:
        self._stop.set()
        self._kicked.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


class ArmGuard:
    """Runs ``make_safe`` exactly once when the actor ends: on :meth:`close`, at interpreter exit,
    or on SIGTERM/SIGHUP (then re-raises the default behaviour, so the process still ends)."""

    SIGNALS = (signal.SIGTERM, signal.SIGHUP)

    def __init__(self, make_safe: Callable[[], None]) -> None:
        self._make_safe = make_safe
        self._done = threading.Lock()
        self._ran = False
        self._previous: dict[int, Any] = {}
        atexit.register(self.close)
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        log.error("signal %d: leaving the arm safe", signum)
        self.close()
        previous = self._previous.get(signum)
        if callable(previous):
            previous(signum, frame)
        else:
            raise SystemExit(128 + signum)

    def close(self) -> None:
        with self._done:
            if self._ran:
                return
            self._ran = True
        try:
            self._make_safe()
        except Exception:
            log.exception("could not leave the arm safe")
        finally:
            atexit.unregister(self.close)
            if threading.current_thread() is threading.main_thread():
                for sig, previous in self._previous.items():
                    signal.signal(sig, previous)
