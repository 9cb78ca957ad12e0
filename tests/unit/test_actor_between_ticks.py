"""The wall-clock loop between ticks, on an injected clock: what the inference backend sends
while the loop sleeps is taken as it comes, with the observation of the tick ahead."""

from __future__ import annotations

import math

import pytest
from doubles import LineEnv, TickPolicy

from robotrl.actor.latency import DelayEstimator
from robotrl.actor.loop import NEWS_GUARD_S, ControlLoop, LoopSettings
from robotrl.actor.queue import ActionQueue
from robotrl.actor.recorder import TransitionRecorder
from robotrl.actor.timing import WallClockScheduler
from robotrl.config.actor import Strategy
from robotrl.core.clock import VirtualClock
from robotrl.core.types import InferenceReply, InferenceRequest, Transition

HORIZON = 32
NEW_VERSION = 5


class TimedWorker:
    """A worker backend on an injected clock: a reply can be read ``infer_s`` after its request;
    weights of version 5 are installed at ``installed_at`` (the chunks asked for from then on
    carry it). ``wait_for_news`` moves the clock to the first of these within its timeout."""

    def __init__(self, clock: VirtualClock, infer_s: float, installed_at: float) -> None:
        self.clock = clock
        self.policy = TickPolicy(horizon=HORIZON)
        self.infer_s = infer_s
        self.installed_at = installed_at
        self.submitted: list[tuple[float, InferenceRequest]] = []
        self._replies: list[tuple[float, InferenceReply]] = []
        self._announced = False

    def submit(self, request: InferenceRequest) -> None:
        now = self.clock.now()
        actions = self.policy.infer(request.observation, request.prefix, request.delay)
        version = NEW_VERSION if now >= self.installed_at else 0
        tick = request.observation.tick
        reply = InferenceReply(request.request_id, request.epoch, tick, actions, version, 0.0)
        self._replies.append((now + self.infer_s, reply))
        self.submitted.append((now, request))

    def poll(self) -> InferenceReply | None:
        if self._replies and self._replies[0][0] <= self.clock.now():
            return self._replies.pop(0)[1]
        return None

    def wait(self, timeout_s: float) -> InferenceReply | None:
        if self._replies:
            self.clock.sleep_until(self._replies[0][0])
        return self.poll()

    def wait_for_news(self, timeout_s: float) -> bool:
        now = self.clock.now()
        news = [ready for ready, _ in self._replies]
        if not self._announced:
            news.append(self.installed_at)
        first = min(news, default=math.inf)
        if first > now + timeout_s:
            self.clock.sleep_until(now + timeout_s)
            return False
        self.clock.sleep_until(first)
        self._announced = self._announced or first == self.installed_at
        return True

    def newest_version(self) -> int:
        return NEW_VERSION if self.clock.now() >= self.installed_at else 0

    def failure(self) -> str | None:
        return None

    def close(self) -> None:
        pass


def run(installed_after_ticks: float, infer_s: float = 0.005) -> tuple[TimedWorker, list[Transition], float]:
    """One 60-tick naive-async episode at 30 Hz; the weights installed that many periods after
    the first tick. Returns the worker, the transitions and the first tick's time (the
    episode's first chunk, asked for at 100 s, arrives ``infer_s`` later)."""
    env = LineEnv(max_ticks=60)
    clock = VirtualClock(100.0)
    t0 = 100.0 + infer_s
    worker = TimedWorker(clock, infer_s, installed_at=t0 + installed_after_ticks * env.spec.dt)
    transitions: list[Transition] = []
    settings = LoopSettings(strategy=Strategy.naive_async, refresh_on_new_weights=True)
    loop = ControlLoop(
        env,
        WallClockScheduler(worker, clock, env.spec.control_hz, timeout_s=10.0),
        ActionQueue(env.spec.action_dim, HORIZON, Strategy.naive_async),
        DelayEstimator(20, 0.9, 1),
        clock,
        TransitionRecorder("a", transitions.extend, 8),
        settings,
    )
    result = loop.run_episode(0, seed=0)
    assert result.ticks == 60 and result.starved_ticks == 0 and result.missed_deadlines == 0
    return worker, transitions, t0


def test_weights_installed_between_ticks_are_asked_for_at_once_and_run_at_the_next_tick():
    worker, transitions, t0 = run(installed_after_ticks=10.5)
    dt = LineEnv().spec.dt
    refresh_at, refresh = next((at, r) for at, r in worker.submitted if at >= worker.installed_at)
    assert refresh_at == pytest.approx(worker.installed_at)  # not at tick 11's deadline
    assert refresh.observation.tick == 11  # the observation the loop held for the tick ahead
    first_new = next(t.tick for t in transitions if t.policy_version == NEW_VERSION)
    assert first_new == 11  # its chunk came 5 ms later, before tick 11: used at tick 11
    assert t0 + 10 * dt < refresh_at < t0 + 11 * dt


def test_news_in_the_guard_before_a_tick_waits_for_the_tick():
    dt = LineEnv().spec.dt
    worker, transitions, t0 = run(installed_after_ticks=11 - NEWS_GUARD_S / 2 / dt)
    refresh_at, refresh = next((at, r) for at, r in worker.submitted if at >= worker.installed_at)
    assert refresh_at == pytest.approx(t0 + 11 * dt)  # at the tick, which it did not make late
    assert refresh.observation.tick == 11
    first_new = next(t.tick for t in transitions if t.policy_version == NEW_VERSION)
    assert first_new == 12
