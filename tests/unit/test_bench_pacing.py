"""The learner bench's paced actor and group timer, on a fake clock (no real waiting)."""

from __future__ import annotations

import math

import pytest

from robotrl.bench.group_timer import GroupTimer
from robotrl.bench.pacing import PacedActor


class FakeClock:
    """A clock that moves only when waited on; ``wait`` never asks to stop."""

    def __init__(self) -> None:
        self.now = 100.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        self.now += seconds
        return False


def test_batches_leave_when_their_last_tick_is_recorded():
    clock = FakeClock()
    sent_at: list[float] = []

    def send(batch: list[int]) -> bool:
        sent_at.append(clock.now)
        return True

    actor = PacedActor(send, lambda: [0] * 8, 30.0, clock=clock, wait=clock.wait)
    actor.run(max_batches=4)
    assert sent_at == pytest.approx([100 + 8 * k / 30 for k in range(1, 5)])
    assert actor.sent_transitions == 32 and actor.sent_batches == 4 and actor.refused == 0


def test_a_late_batch_does_not_push_the_later_ones_back():
    clock = FakeClock()
    sent_at: list[float] = []
    refusals = [True, True]  # the link refuses the first batch twice

    def send(batch: list[int]) -> bool:
        if refusals:
            refusals.pop()
            return False
        sent_at.append(clock.now)
        return True

    actor = PacedActor(send, lambda: [0] * 3, 10.0, clock=clock, wait=clock.wait, retry_s=0.25)
    actor.run(max_batches=3)
    assert sent_at == pytest.approx([100.8, 100.8, 100.9])  # due 100.3, retried twice; then on time
    assert actor.refused == 2 and actor.max_late_s == pytest.approx(0.5)


def test_a_stop_during_a_wait_sends_nothing_more():
    clock = FakeClock()
    sent: list[list[int]] = []

    def wait(seconds: float) -> bool:
        clock.wait(seconds)
        return len(sent) == 2

    actor = PacedActor(lambda b: sent.append(b) is None, lambda: [0], 30.0, clock=clock, wait=wait)
    actor.run()
    assert len(sent) == 2 and actor.sent_batches == 2


def test_stop_ends_an_actor_that_never_waits():
    actor: PacedActor[list[int]]
    n = 0

    def send(batch: list[int]) -> bool:
        nonlocal n
        n += 1
        if n == 5:
            actor.stop()
        return True

    actor = PacedActor(send, lambda: [0] * 64, math.inf)  # full speed: never due later
    actor.run()
    assert actor.sent_batches == 5


def test_hz_must_be_positive():
    with pytest.raises(ValueError, match="hz"):
        PacedActor(lambda b: True, lambda: [0], 0.0)


class Algo:
    """An algorithm whose group takes ``group_s`` of the fake clock and stores ``per_group`` rows."""

    def __init__(self, clock: FakeClock, group_s: float, stored: list[int], per_group: int) -> None:
        self.clock, self.group_s, self.stored, self.per_group = clock, group_s, stored, per_group
        self.progress: list[float] = []

    def update_group(self, next_batch):
        self.clock.now += self.group_s
        self.stored[0] += self.per_group
        return {"actor_updates": 1.0}

    def policy_weights(self):
        return {}

    def set_progress(self, fraction: float) -> None:
        self.progress.append(fraction)

    def state_dict(self):
        return {"k": 1}

    def load_state_dict(self, state) -> None:
        self.loaded = state


def test_group_timer_stops_after_its_seconds_and_min_groups_and_times_whole_intervals():
    clock = FakeClock()
    stored = [0]
    stops: list[int] = []
    timer = GroupTimer(
        Algo(clock, 0.5, stored, 10),
        lambda: stops.append(len(timer.ends)),
        lambda: stored[0],
        seconds=1.2,
        min_groups=2,
        clock=clock,
    )
    for _ in range(5):
        timer.update_group(lambda: {})
        if stops:
            break
    assert stops == [4]  # 3 intervals (1.5 s) are the first past 1.2 s
    assert timer.window_s == pytest.approx(1.5)
    assert timer.groups_per_s() == pytest.approx(2.0)
    assert timer.transitions_per_s() == pytest.approx(20.0)


def test_group_timer_waits_for_min_groups_however_slow_they_are():
    clock = FakeClock()
    stored = [0]
    stops: list[int] = []
    timer = GroupTimer(
        Algo(clock, 5.0, stored, 0),
        lambda: stops.append(len(timer.ends)),
        lambda: stored[0],
        seconds=1.0,
        min_groups=3,
        clock=clock,
    )
    for _ in range(4):
        timer.update_group(lambda: {})
    assert stops == [4] and timer.groups_per_s() == pytest.approx(0.2)


def test_group_timer_before_two_groups_reports_zero_and_delegates_the_rest():
    clock = FakeClock()
    algo = Algo(clock, 1.0, [0], 0)
    timer = GroupTimer(algo, lambda: None, lambda: 0, seconds=1.0, clock=clock)
    timer.update_group(lambda: {})
    assert timer.groups_per_s() == 0.0 and timer.transitions_per_s() == 0.0
    timer.set_progress(0.5)
    timer.load_state_dict({"x": 2})
    assert algo.progress == [0.5] and algo.loaded == {"x": 2} and timer.state_dict() == {"k": 1}
