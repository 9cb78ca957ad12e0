"""`robotrl bench soak --quick` on the default learner config, with CURVE and two cameras, runs
every fault kind and meets the issue's targets (one run, shared by the tests of this module)."""

from __future__ import annotations

from typing import Any

import pytest
from quick_bench import quick_bench

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def soak() -> dict[str, Any]:
    return quick_bench("soak", timeout_s=1100)


def test_bench_soak_quick_injects_ten_fault_kinds_on_the_default_config_with_curve_and_two_cameras(soak):
    assert soak["default_config"] is True and soak["curve"] is True
    cameras = soak["cameras"]
    assert cameras["names"] == ["front", "wrist"] and cameras["size"] == 96
    assert cameras["env_steps_per_s_with"] > 0 and cameras["env_steps_per_s_without"] > 0
    assert soak["fault_kinds_injected"] >= 10
    for name, fault in soak["faults"].items():
        assert fault["injected"] >= 1, name
        assert fault["check"] and isinstance(fault["passed"], bool), name
    assert soak["transitions_sent"] > 0 and soak["learner_sessions"] >= 2


def test_bench_soak_quick_loses_nothing_and_every_fault_meets_its_check(soak):
    counted = ("transitions_", "batches_", "dupl", "faults_")
    accounts = {k: v for k, v in soak.items() if k.startswith(counted)}  # shown when one fails
    assert soak["transitions_lost"] == 0 and soak["duplicates"] == 0, accounts
    assert soak["batches_lost_to_actor_crash"] == 0 and soak["batches_in_flight_at_end"] == 0, accounts
    assert soak["policy_versions_monotonic_per_session"] is True and soak["policy_version_max"] >= 1
    assert soak["missed_deadlines_outside_faults"] == 0
    assert soak["memory_flat"] is True, soak["anon_memory_growth_mb"]
    assert soak["unexpected_exits"] == []
    assert soak["exit_codes"] == {"actor-0": 0, "actor-1": 0, "learner": 0}
    assert soak["faults_failed"] == [], {k: soak["faults"][k] for k in soak["faults_failed"]}
