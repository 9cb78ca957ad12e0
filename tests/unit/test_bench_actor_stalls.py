"""`robotrl bench actor` tells a stall of the loop from CPU time the hypervisor took."""

from __future__ import annotations

import numpy as np

from robotrl.bench.actor import stall_stats

DT = 0.01


def test_a_stall_is_explained_only_when_the_steal_counter_moved_within_it():
    times = np.array([0.0, 0.01, 0.02, 0.05, 0.06, 0.09, 0.1, 0.114])  # 30, 30 and 14 ms: two stalls
    steals = np.array([5, 5, 5, 7, 7, 7, 8, 8])  # moved in the first stall and in a normal tick
    assert stall_stats(times, steals, DT) == {"stalls": 2, "stalls_without_steal": 1}


def test_without_a_steal_counter_every_stall_is_unexplained():
    times = np.array([0.0, 0.03, 0.04])
    assert stall_stats(times, np.full(3, -1), DT) == {"stalls": 1, "stalls_without_steal": 1}
    assert stall_stats(times, np.zeros(0, np.int64), DT) == {"stalls": 1, "stalls_without_steal": 1}
