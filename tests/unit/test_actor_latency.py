"""The delay estimate: a windowed quantile that forgets spikes; seconds to ticks."""

from __future__ import annotations

import pytest

from robotrl.actor.latency import DelayEstimator, seconds_to_ticks


def test_seconds_become_the_ticks_consumed():
    assert seconds_to_ticks(0.0, 30.0) == 0
    assert seconds_to_ticks(0.1, 30.0) == 3  # exactly three periods, despite float error
    assert seconds_to_ticks(0.101, 30.0) == 4
    assert seconds_to_ticks(0.15, 30.0) == 5
    with pytest.raises(ValueError):
        seconds_to_ticks(-0.1, 30.0)


def test_initial_guess_until_the_first_measurement():
    est = DelayEstimator(window=10, quantile=0.9, initial_ticks=6)
    assert est.expected() == 6
    est.record(2)
    assert est.expected() == 2


def test_a_single_spike_is_forgotten_within_the_window():
    est = DelayEstimator(window=10, quantile=0.9, initial_ticks=0)
    est.record(60)  # warm-up spike
    for _ in range(8):
        est.record(4)
        assert est.expected() == 60  # too few measurements to outvote it yet
    est.record(4)  # 1 spike in 10: the 90% quantile no longer sees it
    assert est.expected() == 4
    est.record(4)  # and now it has left the window for good
    assert len(est) == 10 and est.expected() == 4


def test_quantile_follows_a_real_shift_in_latency():
    est = DelayEstimator(window=20, quantile=0.9, initial_ticks=0)
    for _ in range(20):
        est.record(3)
    for _ in range(5):
        est.record(9)
    assert est.expected() == 9  # 5 of 20 above: the 90% quantile sees them
