"""The transport bench reports each ratio's median round, whole, not medians taken apart."""

from __future__ import annotations

from robotrl.bench.transport import median_round


def test_the_median_round_is_one_round_and_the_lower_middle_of_an_even_count():
    assert median_round([0.90, 0.80, 1.00]) == 0
    assert median_round([3.0, 1.0, 2.0]) == 2
    assert median_round([0.7]) == 0
    assert median_round([2.0, 1.0, 4.0, 3.0]) == 0  # 1, 2, 3, 4: the lower middle, 2.0, is round 0
