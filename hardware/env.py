"""Any lerobot :class:`~lerobot.robots.robot.Robot` as a robotrl :class:`RobotEnv` (wall-clock only).

Each :meth:`LerobotRobotEnv.step` polls the human (emergency stop, success, failure,
take-over), picks the command (the policy's, or the teleoperator's while the human
drives), passes it through the :class:`~robotrl.hardware.safety.SafetyLayer`, sends it,
and reads the next observation. The state is the joint positions in action units, then
their velocities (finite differences over the measured time between reads). A failed
read is counted and the last observation stands in, so a noisy bus does not stop the
loop; too many failures in a row do. The watchdog and the arm guard share the bus lock,
so a hold from another thread never interleaves with a command. A non-finite joint reading
ends the episode with the arm holding its last good goal, and no non-finite command is ever
sent. :meth:`LerobotRobotEnv.responsive` tells the out-of-process supervisor
(:mod:`~robotrl.hardware.supervisor`) whether a bus call has hung.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
from robotrl.hardware.events import HumanInput
from robotrl.hardware.safety import ArmGuard, SafetyLayer, SafetyLimits, Watchdog

from robotrl.core.protocols import StepResult
from robotrl.core.types import OUTCOME_INFO_KEY, EnvSpec, FloatArray, ImageArray, Observation

if TYPE_CHECKING:
    from robotrl.hardware.supervisor import SupervisorLink

log = logging.getLogger(__name__)

SuccessDetector = Callable[[Observation], bool]

NON_FINITE_READING = "non-finite joint reading"
"""The outcome of an episode ended because the arm reported NaN or inf (``info["outcome"]``)."""


class ArmStoppedError(RuntimeError):
    """The arm can no longer be driven (too many failed reads); it was left safe."""


def robot_spec(
    robot: Any, limits: SafetyLimits, control_hz: float, max_episode_ticks: int, instruction: str = ""
) -> EnvSpec:
    """The :class:`EnvSpec` of a lerobot robot (connected or not: the learner's host has no arm).

    Actions are the robot's action features; the state is their positions, then velocities;
    cameras are the observation features shaped (H, W, 3).
    """
    features = robot.observation_features
    names = tuple(robot.action_features)
    cameras = {k: tuple(v) for k, v in features.items() if isinstance(v, tuple) and len(v) == 3}
    missing = [n for n in names if n not in features]
    if missing:
        raise ValueError(f"{robot}: the observation lacks the action joints {missing}")
    if limits.low.shape != (len(names),):
        raise ValueError(
            f"safety limits have {limits.low.shape[0]} joints, {robot} has {len(names)}: {list(names)}"
        )
    return EnvSpec(
        name=f"lerobot/{getattr(robot, 'name', type(robot).__name__)}",
        action_names=names,
        action_low=tuple(float(v) for v in limits.low),
        action_high=tuple(float(v) for v in limits.high),
        state_names=names + tuple(n.removesuffix(".pos") + ".vel" for n in names),
        camera_shapes={c: (int(s[0]), int(s[1]), 3) for c, s in cameras.items()},
        control_hz=control_hz,
        max_episode_ticks=max_episode_ticks,
        instruction=instruction,
    )


class LerobotRobotEnv:
    """A connected lerobot robot (and optional teleoperator) stepped at the control rate."""

    def __init__(
        self,
        robot: Any,
        safety: SafetyLayer,
        *,
        control_hz: float,
        max_episode_ticks: int,
        instruction: str = "",
        teleop: Any | None = None,
        human: HumanInput | None = None,
        success_detector: SuccessDetector | None = None,
        success_reward: float = 1.0,
        watchdog_s: float = 0.25,
        disable_torque_on_stop: bool = False,
        max_read_failures: int = 10,
        wait_for_reset: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.robot, self.safety, self.teleop = robot, safety, teleop
        self.human = human or HumanInput([])
        self.success_detector = success_detector
        self.success_reward = success_reward
        self.disable_torque_on_stop = disable_torque_on_stop
        self.max_read_failures = max_read_failures
        self.wait_for_reset = wait_for_reset
        self._episodes = 0
        self._pause = threading.Event()  # never set: waiting on it is a pause
        self._clock = clock
        self._spec = robot_spec(robot, safety.limits, control_hz, max_episode_ticks, instruction)
        self.action_names = self._spec.action_names
        self.cameras = dict(self._spec.camera_shapes)
        self.bus_lock = threading.RLock()
        self.counts: Counter[str] = Counter()
        """read_failures, teleop_read_failures, watchdog_holds, interventions (ticks), safe_stops,
        non_finite_readings, non_finite_commands (refused, never sent)."""
        self._bus_call_since: float | None = None
        self._fault: str | None = None
        """Why the episode must end now (a non-finite reading); None while the arm is sane."""
        self.supervisor: SupervisorLink | None = None
        """The out-of-process supervisor (``hardware.safety.supervisor_s``), told goodbye once the
        arm is left safe."""
        self._tick = 0
        self._positions: FloatArray = np.zeros(len(self.action_names), np.float32)
        self._velocity: FloatArray = np.zeros(len(self.action_names), np.float32)
        self._read_time: float | None = None
        self._images: dict[str, ImageArray] = {}
        self._failures_in_row = 0
        self._intervening = False
        self.watchdog = Watchdog(watchdog_s, self._watchdog_hold)
        self.watchdog.start()
        self.guard = ArmGuard(self.make_safe)

    @property
    def spec(self) -> EnvSpec:
        return self._spec

    # -- the arm ------------------------------------------------------------------------

    @contextmanager
    def _bus(self) -> Iterator[None]:
        """The bus, exclusively; records when the outermost call started (see :meth:`responsive`)."""
        with self.bus_lock:
            outermost = self._bus_call_since is None
            if outermost:
                self._bus_call_since = self._clock()
            try:
                yield
            finally:
                if outermost:
                    self._bus_call_since = None

    def responsive(self, stall_s: float) -> bool:
        """False while one bus call has taken longer than ``stall_s`` (a hung read or write)."""
        since = self._bus_call_since
        return since is None or self._clock() - since <= stall_s

    def _send(self, command: FloatArray) -> None:
        """Send ``command``, unless any entry is NaN or inf: then send nothing (the servos keep
        their last goal, which is a hold) and count it. The last check before the bus."""
        if not np.all(np.isfinite(command)):
            self.counts["non_finite_commands"] += 1
            log.error("non-finite command %s not sent; the arm holds its last goal", command.tolist())
            return
        with self._bus():
            self.robot.send_action(dict(zip(self.action_names, command.tolist(), strict=True)))

    def hold(self) -> None:
        """Command the arm to stay where it is now (watchdog, stop); safe from any thread."""
        with self._bus():
            raw = self.robot.get_observation()
            present = np.array([raw[n] for n in self.action_names], np.float32)
            self._send(np.clip(present, self.safety.limits.low, self.safety.limits.high))

    def emergency_stop(self, reason: str = "operator") -> None:
        """Latch the stop and hold the arm now, from any thread (a key reader, a button)."""
        if self.safety.estop.pressed:
            return
        self.safety.estop.press(reason)
        if self.robot.is_connected:
            self.hold()

    def _watchdog_hold(self) -> None:
        self.hold()
        self.counts["watchdog_holds"] += 1

    def make_safe(self) -> None:
        """Leave the arm safe, then dismiss the supervisor (if this fails, the supervisor holds it)."""
        self._leave_safe()
        if self.supervisor is not None:
            self.supervisor.goodbye()

    def _leave_safe(self) -> None:
        """Hold position, optionally drop torque, disconnect: the arm's state when robotrl is gone."""
        self.watchdog.stop()
        self.counts["safe_stops"] += 1
        with self._bus():
            if not self.robot.is_connected:
                return
            try:
                self.hold()
            finally:
                if self.disable_torque_on_stop:
                    self.robot.bus.disable_torque(num_retry=5)
                elif hasattr(self.robot.config, "disable_torque_on_disconnect"):
                    self.robot.config.disable_torque_on_disconnect = False  # keep holding after we are gone
                self.robot.disconnect()
        log.warning("arm left safe (%s)", "torque off" if self.disable_torque_on_stop else "holding")

    def _observe(self) -> Observation:
        """Read the robot; on a failed read reuse the last observation (counted)."""
        try:
            with self._bus():
                raw = self.robot.get_observation()
        except ConnectionError as exc:
            self.counts["read_failures"] += 1
            self._failures_in_row += 1
            log.warning("read failed (%d in a row): %s", self._failures_in_row, exc)
            if self._failures_in_row > self.max_read_failures:
                self.guard.close()
                raise ArmStoppedError(
                    f"{self._failures_in_row} failed reads in a row; arm left safe"
                ) from exc
            self._velocity[:] = 0.0
            return self._observation()
        self._failures_in_row = 0
        now = self._clock()
        positions = np.array([raw[n] for n in self.action_names], np.float32)
        if not np.all(np.isfinite(positions)):
            return self._non_finite_reading(positions)
        if self._read_time is not None and now > self._read_time:
            self._velocity = ((positions - self._positions) / (now - self._read_time)).astype(np.float32)
        self._positions, self._read_time = positions, now
        self._images = {c: np.asarray(raw[c], np.uint8) for c in self.cameras}
        return self._observation()

    def fault(self) -> str | None:
        """Why this episode must end (a non-finite reading), or None."""
        return self._fault

    def _non_finite_reading(self, positions: FloatArray) -> Observation:
        """NaN or inf from the arm: keep the last good reading, hold, and end the episode."""
        bad = {n: v for n, v in zip(self.action_names, positions.tolist(), strict=True) if not np.isfinite(v)}
        self.counts["non_finite_readings"] += 1
        if self._fault is None:
            self._fault = f"{NON_FINITE_READING} {bad}"
            log.error("%s at tick %d: the arm holds its last goal, the episode ends", self._fault, self._tick)
            if self.disable_torque_on_stop:
                with self._bus():
                    self.robot.bus.disable_torque(num_retry=5)
        self._velocity[:] = 0.0
        return self._observation()

    def _observation(self) -> Observation:
        return Observation(
            tick=self._tick,
            state=np.concatenate([self._positions, self._velocity]).astype(np.float32),
            images=dict(self._images),
            instruction=self._spec.instruction,
            timestamp=self._clock(),
        )

    # -- RobotEnv -----------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> Observation:
        """Start an episode where the arm is (a real scene cannot be re-seeded; ``seed`` is unused)."""
        del seed
        self.watchdog.pause()
        if self._episodes and self.wait_for_reset:
            self._wait_for_operator()
        if self.safety.estop.pressed:
            raise ArmStoppedError(
                f"emergency stop is latched ({self.safety.estop.reason}); restart the actor"
            )
        self._episodes += 1
        self._tick = 0
        self._fault = None
        self._read_time = None
        self._velocity[:] = 0.0
        obs = self._observe()
        self.safety.reset(self._positions)
        return obs

    def _wait_for_operator(self) -> None:
        """Between episodes the arm holds while the human resets the scene, then presses n."""
        log.warning("episode over: reset the scene, then press n (space: emergency stop)")
        while True:
            events = self.human.poll()
            if events.estop:
                self.safety.estop.press("operator")
            if events.next_episode or self.safety.estop.pressed:
                return
            self._pause.wait(0.05)

    def step(self, action: FloatArray) -> StepResult:
        if self._fault is not None:  # the arm reported NaN at reset: nothing is sent
            return self._end_on_fault(None)
        events = self.human.poll()
        if events.estop:
            self.safety.estop.press("operator")
        wanted = np.asarray(action, np.float32)
        intervention = events.intervention and self.teleop is not None
        if intervention:
            wanted = self._teleop_action(wanted)
            self.counts["interventions"] += 1
        if intervention != self._intervening:
            log.warning("intervention %s at tick %d", "starts" if intervention else "ends", self._tick)
            self._intervening = intervention
        command = self.safety(wanted, self._positions, self._velocity)
        self._send(command)
        self.watchdog.kick()
        self._tick += 1
        obs = self._observe()
        if self.fault() is not None:  # this tick's reading was NaN or inf
            return self._end_on_fault(command)
        stopped = self.safety.estop.pressed
        if stopped and self.disable_torque_on_stop:
            with self._bus():
                self.robot.bus.disable_torque(num_retry=5)
        success = events.success or (self.success_detector is not None and self.success_detector(obs))
        terminated = success or events.failure
        truncated = not terminated and (stopped or self._tick >= self._spec.max_episode_ticks)
        if terminated or truncated:
            self.watchdog.pause()  # no command is due until the next episode starts
        info = {
            "is_success": success,
            "executed": command,
            "intervention": intervention,
            "estop": stopped,
            "estops": self.safety.estop.presses,
        }
        return StepResult(obs, self.success_reward if success else 0.0, terminated, truncated, info)

    def _end_on_fault(self, command: FloatArray | None) -> StepResult:
        """The episode's last step after a non-finite reading; its outcome names the reason."""
        self.watchdog.pause()  # a hold would re-read the faulty arm; its last goal stands
        executed = self.safety.last_command if command is None else command
        info = {
            "is_success": False,
            "executed": executed,
            "intervention": False,
            "estop": self.safety.estop.pressed,
            "estops": self.safety.estop.presses,
            OUTCOME_INFO_KEY: self._fault,
        }
        return StepResult(self._observation(), 0.0, False, True, info)

    def _teleop_action(self, fallback: FloatArray) -> FloatArray:
        """The human's action; a failed leader read keeps the policy's action (counted)."""
        if self.teleop is None:
            return fallback
        try:
            raw = self.teleop.get_action()
        except ConnectionError as exc:
            self.counts["teleop_read_failures"] += 1
            log.warning("teleoperator read failed: %s", exc)
            return fallback
        return np.array([raw[n] for n in self.action_names], np.float32)

    def report(self) -> dict[str, int]:
        """Every safety rule that changed a command, every hold, stop and failed read, counted."""
        return {**self.safety.counts, **self.counts, "estops": self.safety.estop.presses}

    def close(self) -> None:
        self.guard.close()
        self.human.close()
        if self.teleop is not None and self.teleop.is_connected:
            self.teleop.disconnect()
