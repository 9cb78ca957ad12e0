"""Clocks: virtual time moves only when told; the monotonic clock never returns early."""

from __future__ import annotations

import threading

import pytest

from robotrl.core.clock import Clock, MonotonicClock, VirtualClock


def test_virtual_clock_moves_only_when_told():
    clock = VirtualClock(start=10.0)
    assert clock.now() == 10.0
    clock.advance(0.5)
    clock.sleep_until(11.0)
    assert clock.now() == 11.0
    clock.sleep_until(3.0)  # a passed deadline returns at once and does not go back
    assert clock.now() == 11.0
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(-1.0)


def test_virtual_clock_is_safe_across_threads():
    clock = VirtualClock()
    workers = [threading.Thread(target=lambda: [clock.advance(1.0) for _ in range(1000)]) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=10)
    assert clock.now() == 4000.0


def test_monotonic_clock_sleep_until_never_returns_before_the_deadline():
    clock = MonotonicClock()
    for _ in range(5):
        deadline = clock.now() + 0.002
        clock.sleep_until(deadline)
        assert clock.now() >= deadline


def test_both_clocks_satisfy_the_protocol():
    assert isinstance(MonotonicClock(), Clock)
    assert isinstance(VirtualClock(), Clock)
