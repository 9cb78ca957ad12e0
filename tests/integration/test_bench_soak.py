"""`robotrl bench soak --quick` runs end to end, injects its faults and meets the issue's targets."""

from __future__ import annotations

import pytest
from quick_bench import quick_bench


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_bench_soak_quick_loses_nothing_through_its_faults_and_reports_every_field():
    result = quick_bench("soak", timeout_s=850)
    assert result["faults_injected"] == 5
    assert result["transitions_sent"] > 0
    counted = ("transitions_", "batches_", "dupl", "fault_")
    accounts = {k: v for k, v in result.items() if k.startswith(counted)}  # shown when one fails
    assert result["transitions_lost"] == 0 and result["duplicates"] == 0, accounts
    assert result["batches_lost_to_actor_crash"] == 0 and result["batches_in_flight_at_end"] == 0, accounts
    assert result["policy_versions_monotonic"] is True and result["policy_version_max"] >= 1
    assert result["max_missed_deadlines"] == 0
    assert result["peak_rss_mb"] > 0
    assert result["exit_codes"] == {"actor-0": 0, "actor-1": 0, "learner": 0}
    lines = result["log_lines"]
    assert (
        lines["actor: learner silent, reconnecting"] >= 1 and lines["learner: resumed from checkpoint"] >= 1
    )
