"""The control loop: observe, take this tick's chunk news, maybe ask for the next chunk,
pop this tick's action, safety-filter it, act, record. Nothing else runs in a tick.

Ticks are scheduled by absolute deadlines (``t0 + k * dt``), never by sleeping ``dt``
after the work, so a late tick does not push every later one back. A missed deadline is
a command sent after its period ended, or a whole period lost to a stall; after a stall
the schedule is re-anchored instead of bursting commands to catch up. The tick is the
environment's step count. Between ticks the loop waits on the inference backend and plans
with the observation it already holds when a chunk or new weights come (wall clock; in
virtual time chunks arrive at their due ticks). Wall-clock and virtual time run this same
code: only the clock and the scheduler differ.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from robotrl.actor.latency import DelayEstimator
from robotrl.actor.queue import ActionQueue, ChunkRefusedError
from robotrl.actor.recorder import TransitionRecorder
from robotrl.actor.safety import ActionClipper
from robotrl.actor.strategies import held_to
from robotrl.actor.timing import Arrival, InferenceFailedError, VirtualTimeScheduler, WallClockScheduler
from robotrl.config.actor import Strategy
from robotrl.core.clock import Clock
from robotrl.core.protocols import LoopObserver, RobotEnv, StepResult
from robotrl.core.types import OUTCOME_INFO_KEY, ActionChunk, FloatArray, InferenceRequest, Observation

log = logging.getLogger(__name__)

Scheduler = WallClockScheduler | VirtualTimeScheduler

NEWS_GUARD_S = 0.001
"""What the backend sends less than this before a tick is taken at the tick, not before it."""


@dataclass(frozen=True)
class LoopSettings:
    strategy: Strategy
    margin_ticks: int = 2
    """Ask for the next chunk when planned actions left <= expected delay + margin."""
    refresh_on_new_weights: bool = True
    """Async strategies: ask for a chunk as soon as the backend holds newer weights."""
    execution_horizon: int = 0
    """Async strategies: ask for the next chunk this many ticks after the last request, however
    many planned actions are left (RTC's execution horizon); 0: only when they run low."""
    max_prefix: int = 12
    """Longest committed prefix given to the policy (the delays it was trained with)."""
    max_in_flight: int = 1
    """prefix: inferences in flight at once. Above 1 (pipelined), a new request is made while
    others are computed whenever the newest one's chunk would leave no more than the expected
    delay, so the delay estimate drives how many are in flight; 1: one at a time."""
    max_inference_errors: int = 3
    """Consecutive failed inferences before the loop stops and reports."""
    first_chunk_timeout_s: float = 60.0
    """How long the robot may wait for the first chunk of an episode (warm-up included)."""
    seed: int = 0
    """Base of the per-request seeds of the policy's sampling."""


@dataclass(frozen=True, slots=True)
class Pending:
    """A request in flight: its observation's tick, the actions it commits, and whether its
    chunk starts where it arrives (a stop-and-wait request) instead of at that tick."""

    obs_tick: int
    prefix_len: int
    at_arrival: bool


@dataclass
class EpisodeResult:
    """What one episode did; every count is exact, nothing is estimated."""

    episode_id: int
    seed: int
    ticks: int = 0
    success: bool = False
    success_tick: int | None = None
    total_reward: float = 0.0
    starved_ticks: int = 0
    missed_deadlines: int = 0
    chunks_merged: int = 0
    weight_refreshes: int = 0
    """Chunks asked for early because newer weights were loaded."""
    chunks_refused: Counter[str] = field(default_factory=Counter)
    inference_errors: int = 0
    prefix_overruns: int = 0
    delays: list[int] = field(default_factory=list)
    policy_versions: list[int] = field(default_factory=list)
    clamped_ticks: int = 0
    intervention_ticks: int = 0
    """Ticks a human drove the arm (a real arm's teleoperator)."""
    outcome: str | None = None
    """How the episode ended, as the environment names it (its last step's ``OUTCOME_INFO_KEY``:
    "success", "cube pushed, never lifted", ...); None when it does not say."""
    jerk_rms: float = 0.0
    lateness_ms: list[float] = field(default_factory=list)
    failure: str | None = None


def early_request_pays(delay: int, horizon: int) -> bool:
    """Whether asking for the next chunk before the plan runs out moves the arm more per tick
    than letting it run out and waiting, for a continuing (``prefix``) chunk.

    Asked ``delay`` ticks early, each chunk adds ``horizon - delay`` new actions, one chunk per
    ``max(delay, horizon - delay)`` ticks; asked when the plan is empty, it adds ``horizon``
    actions per ``horizon + delay`` ticks, the arm holding still while it waits. Asking early
    pays while ``(horizon - delay) / delay >= horizon / (horizon + delay)`` beyond half the chunk
    (always below it): up to ``delay ~ 0.62 horizon`` (19 of 32 ticks)."""
    return (horizon - delay) * (horizon + delay) >= horizon * delay


def jerk_rms(actions: FloatArray, dt: float) -> float:
    """Root mean square of the third time-derivative of the executed actions."""
    if len(actions) < 4:
        return 0.0
    jerk = np.diff(actions.astype(np.float64), n=3, axis=0) / dt**3
    return float(np.sqrt(np.mean(jerk**2)))


class ControlLoop:
    """Runs episodes of one environment with chunks from one scheduler."""

    def __init__(
        self,
        env: RobotEnv,
        scheduler: Scheduler,
        queue: ActionQueue,
        estimator: DelayEstimator,
        clock: Clock,
        recorder: TransitionRecorder,
        settings: LoopSettings,
        observer: LoopObserver | None = None,
    ) -> None:
        self.env = env
        self.spec = env.spec
        self.scheduler = scheduler
        self.queue = queue
        self.estimator = estimator
        self.clock = clock
        self.recorder = recorder
        self.settings = settings
        self.observer = observer
        self.safety = ActionClipper(env.spec)
        self._next_request_id = 0
        self._consecutive_errors = 0
        self._flight: dict[int, Pending] = {}  # the requests in flight, oldest first
        self._requested_tick = 0  # observation tick of the newest request
        self._running_version = -1  # policy version of the newest chunk merged
        self._episode_id = -1
        self._stop = threading.Event()

    def request_stop(self) -> None:
        """End the running episode at the next tick (the arm keeps its last command); thread-safe."""
        self._stop.set()

    # -- chunks -------------------------------------------------------------------

    def _request(self, obs: Observation, episode_id: int) -> None:
        """Ask for a chunk from ``obs``; under ``prefix`` hand over the committed actions.

        A prefix request made while the plan is empty and nothing is in flight is a stop-and-wait
        request: the arm holds still until the chunk arrives, so the chunk starts where it
        arrives, as sync's does. One made while another is in flight (pipelined) continues that
        one's chunk, which only the backend knows yet: it fills the committed actions in."""
        prefix, delay, continues = None, 0, -1
        at_arrival = self.settings.strategy is Strategy.sync
        if self.settings.strategy is Strategy.prefix:
            left = self.queue.remaining(obs.tick)
            delay = min(self.estimator.expected(), self.settings.max_prefix)
            if self._flight and delay:
                continues = next(reversed(self._flight))
            elif left:
                prefix = self._committed(obs.tick, delay, left) if delay else None
            else:
                at_arrival, delay = True, 0
        rid = self._next_request_id
        self._next_request_id += 1
        seed = hash((self.settings.seed, episode_id, rid)) & 0x7FFF_FFFF
        request = InferenceRequest(rid, self.queue.epoch, obs, prefix, delay, seed, continues)
        self.scheduler.request(request, obs.tick)
        self._flight[rid] = Pending(obs.tick, delay, at_arrival)
        self._requested_tick = obs.tick

    def _committed(self, tick: int, delay: int, left: int) -> FloatArray:
        """The ``delay`` actions the robot will execute from ``tick`` while the chunk is computed,
        as it will execute them (clipped: what the policy was trained on, the executed actions of
        demonstrations and online rows): the plan's, then its last action held where the plan
        ends first, which is what the arm does when it runs out."""
        return self.safety.bound(held_to(self.queue.committed(tick, min(delay, left)), delay))

    def _accept(self, arrival: Arrival, result: EpisodeResult) -> None:
        """Merge an arrived chunk, or count why it was refused or failed."""
        reply = arrival.reply
        pending = self._flight.pop(reply.request_id, Pending(reply.obs_tick, 0, False))
        if reply.error is not None or reply.actions is None:
            self._consecutive_errors += 1
            result.inference_errors += 1
            log.warning("inference %d failed: %s", reply.request_id, reply.error)
            return
        self._consecutive_errors = 0
        delay = arrival.ready_tick - reply.obs_tick
        try:
            chunk = ActionChunk(
                chunk_id=reply.request_id,
                actions=reply.actions,
                obs_tick=reply.obs_tick,
                ready_tick=arrival.ready_tick,
                start_tick=arrival.ready_tick if pending.at_arrival else reply.obs_tick,
                policy_version=reply.policy_version,
                epoch=reply.epoch,
                prefix_len=min(pending.prefix_len, len(reply.actions)) if reply.actions.ndim == 2 else 0,
            )
            self.queue.merge(chunk, arrival.ready_tick)
        except ChunkRefusedError as exc:
            result.chunks_refused[exc.reason] += 1
            log.warning("chunk %d refused: %s", reply.request_id, exc)
            return
        except ValueError as exc:
            result.chunks_refused["malformed"] += 1
            log.warning("chunk %d refused: %s", reply.request_id, exc)
            return
        if reply.epoch == self.queue.epoch:
            self.estimator.record(delay)
        if self.observer is not None:
            self.observer.on_chunk(self._episode_id, chunk)
        result.chunks_merged += 1
        self._running_version = reply.policy_version
        result.delays.append(delay)
        result.policy_versions.append(reply.policy_version)
        if self.settings.strategy is Strategy.prefix and delay > pending.prefix_len:
            result.prefix_overruns += 1  # ran past the committed prefix: a small seam at the switch

    def _take_news(self, tick: int, result: EpisodeResult) -> None:
        """Merge the chunks that arrived by ``tick``, oldest first; note a failure in ``result``."""
        try:
            news = self.scheduler.arrived(tick)
        except InferenceFailedError as exc:
            result.failure, news = str(exc), []
        for arrival in news:
            self._accept(arrival, result)
        result.failure = result.failure or self._failure()

    def _wants_chunk(self, tick: int, result: EpisodeResult) -> bool:
        strategy = self.settings.strategy
        pipelined = strategy is Strategy.prefix and self.settings.max_in_flight > 1
        if self._flight and (not pipelined or len(self._flight) >= self.settings.max_in_flight):
            return False  # the common tick: waiting on the inference in flight
        expected = self.estimator.expected()
        margin = self.settings.margin_ticks if self.estimator.varies() else 0
        if self._flight:
            newest = self._flight[next(reversed(self._flight))]
            if newest.at_arrival:
                return False  # where its chunk starts is known only when it arrives
            return newest.obs_tick + self.queue.horizon - tick <= expected + margin
        left = self.queue.remaining(tick)
        if strategy is Strategy.sync:
            return left == 0
        if (
            strategy is Strategy.prefix
            and not pipelined
            and not early_request_pays(expected, self.queue.horizon)
        ):
            return left == 0  # so long a delay that stopping to wait moves the arm more
        if left <= expected + margin:
            return True
        horizon = self.settings.execution_horizon
        if horizon and tick - self._requested_tick >= horizon:
            return True
        if (
            self.settings.refresh_on_new_weights
            and self.scheduler.backend.newest_version() != self._running_version
        ):
            # Other weights are loaded (newer, or a restarted learner's lower version): use them now.
            result.weight_refreshes += 1
            return True
        return False

    def _failure(self) -> str | None:
        if self._consecutive_errors >= self.settings.max_inference_errors:
            return f"{self._consecutive_errors} consecutive inference errors"
        return self.scheduler.failure()

    # -- episodes -----------------------------------------------------------------

    def run_episode(self, episode_id: int, seed: int) -> EpisodeResult:
        """One episode from reset to termination, truncation or a failure (the arm then holds)."""
        result = EpisodeResult(episode_id, seed)
        spec = self.spec
        executed = np.zeros((spec.max_episode_ticks + 1, spec.action_dim), np.float32)
        lateness = np.zeros(spec.max_episode_ticks + 1, np.float64)
        clamped_before = self.safety.clamped_ticks
        obs = self._begin(episode_id, seed, result)
        if result.failure is not None:
            return result
        hold: FloatArray = np.array(obs.state[: spec.action_dim], dtype=np.float32)

        gc.collect()
        gc.freeze()  # full collections stay cheap: they skip everything alive at start-up
        dt = spec.dt
        t0 = self.clock.now()
        k = 0  # control ticks since the first chunk arrived
        while True:
            deadline = t0 + k * dt
            self._sleep_taking_news(deadline, obs, episode_id, result)
            now = self.clock.now()
            late = now - deadline
            if late >= dt:  # whole periods lost (a stall): count them, re-anchor, never burst
                lost = int(late // dt)
                result.missed_deadlines += lost
                t0 += lost * dt
                deadline += lost * dt
                late = now - deadline
            if not self._plan(obs, episode_id, result):
                log.error("actor stops, arm holds: %s", result.failure)
                self.env.step(hold)
                break
            step, hold = self._act(obs, episode_id, hold, now, late, result)
            i = min(result.ticks, spec.max_episode_ticks)
            executed[i] = hold
            lateness[i] = late
            result.ticks += 1
            result.total_reward += float(step.reward)
            if step.info.get("is_success") and result.success_tick is None:
                result.success, result.success_tick = True, result.ticks
            if self.clock.now() > deadline + dt:
                result.missed_deadlines += 1  # the command went out after its period ended
            if step.terminated or step.truncated:
                result.outcome = step.info.get(OUTCOME_INFO_KEY)
                break
            if self._stop.is_set():
                break
            obs = step.observation
            k += 1

        self.recorder.flush()
        gc.unfreeze()
        result.clamped_ticks = self.safety.clamped_ticks - clamped_before
        result.jerk_rms = jerk_rms(executed[: result.ticks], dt)
        result.lateness_ms = (lateness[: result.ticks] * 1e3).tolist()
        return result

    def _sleep_taking_news(
        self, deadline: float, obs: Observation, episode_id: int, result: EpisodeResult
    ) -> None:
        """Sleep to ``deadline``, planning with ``obs`` (the next tick's observation) whenever the
        backend sends something meanwhile, as the tick itself would: a chunk is merged as it comes
        and new weights are asked for as soon as they are installed, not up to a period later.
        News in the last :data:`NEWS_GUARD_S` waits for the tick, which it must not make late."""
        while result.failure is None and self.scheduler.wait_for_news(deadline - NEWS_GUARD_S):
            self._plan(obs, episode_id, result)
        self.clock.sleep_until(deadline)

    def _begin(self, episode_id: int, seed: int, result: EpisodeResult) -> Observation:
        """Reset the environment and wait for the episode's first chunk (a failure goes in ``result``)."""
        self._episode_id = episode_id
        self.queue.reset()
        self._consecutive_errors = 0
        self._flight.clear()
        self.scheduler.forget()
        obs = self.env.reset(seed=seed)
        try:
            self._request(obs, episode_id)
            arrival, waited = self.scheduler.await_first(obs.tick, self.settings.first_chunk_timeout_s)
            self.estimator.record(waited)
            self._accept(arrival, result)
        except InferenceFailedError as exc:
            result.failure = str(exc)
        return obs

    def _plan(self, obs: Observation, episode_id: int, result: EpisodeResult) -> bool:
        """Merge what arrived and ask for the next chunk when it is time; False on a failure."""
        self._take_news(obs.tick, result)
        if result.failure is None and self._wants_chunk(obs.tick, result):
            self._request(obs, episode_id)
            # An inference shorter than a tick (a "0 ms" latency model) is usable at once:
            # without this second look even sync at 0 ms would starve a tick per chunk.
            self._take_news(obs.tick, result)
        return result.failure is None

    def _act(
        self,
        obs: Observation,
        episode_id: int,
        hold: FloatArray,
        now: float,
        late: float,
        result: EpisodeResult,
    ) -> tuple[StepResult, FloatArray]:
        """Send this tick's planned action (``hold`` when the plan ran out) and record the
        transition; returns the step and the action the arm executed."""
        planned = self.queue.pop(obs.tick)
        if planned is None:
            result.starved_ticks += 1
            action = hold
        else:
            action = self.safety(planned.action)
        action_time = self.clock.now()
        step = self.env.step(action)
        # A real arm reports what it executed: after its own safety layer, or the human's
        # action while they drive (the transition is then flagged as an intervention).
        action = step.info.get("executed", action)
        intervention = bool(step.info.get("intervention", False))
        result.intervention_ticks += intervention
        self.recorder.record(episode_id, obs, action, planned, step, now, action_time, intervention)
        if self.observer is not None:
            proposed = action if planned is None else planned.action
            self.observer.on_tick(episode_id, obs, action, proposed, late, planned is None)
        return step, action
