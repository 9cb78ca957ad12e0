"""`robotrl bench actor --quick` runs our actor (normal and SCHED_FIFO), lerobot's and the bare
loop (the machine's floor) at 100 and 200 Hz beside a busy learner, and reports every side."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FIGURES = (
    "ticks_lost",
    "missed_deadlines",
    "jitter_p50_ms",
    "jitter_p99_ms",
    "jitter_max_ms",
    "starved_ticks",
    "gc_collections",
)
ROBOTRL = shutil.which("robotrl") or str(Path(sys.executable).parent / "robotrl")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_bench_actor_quick_reports_ours_and_lerobots_figures():
    out = subprocess.run(
        [ROBOTRL, "bench", "actor", "--quick"], capture_output=True, text=True, timeout=880, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["bench"] == "actor", result
    assert result["learner_updates_per_s"] > 0  # the learner really updated beside the actors
    for rate in ("hz_100", "hz_200"):
        sides = result[rate]
        assert set(sides) == {"robotrl", "robotrl_realtime", "lerobot", "bare_loop"}
        floor = sides["bare_loop"]
        hz = int(rate.removeprefix("hz_"))
        # the bare loop kept the rate: most intervals one period (a loop that never waits: none)
        assert "error" in floor or floor["jitter_p50_ms"] < 1000 / hz / 2, floor
        assert all(side["steal_ms"] >= 0 or math.isnan(side["steal_ms"]) for side in sides.values())
        assert "error" not in sides["robotrl"] and "error" not in sides["lerobot"], sides
        for side in ("robotrl", "lerobot"):
            for key in FIGURES:
                assert sides[side][key] >= 0, (rate, side, key)
        assert sides["robotrl"]["swaps"] >= 4  # swaps every 2 s over 15 s reached the policy
        realtime = sides["robotrl_realtime"]
        assert "error" in realtime or realtime["swaps"] >= 4  # refused (not root): said why
