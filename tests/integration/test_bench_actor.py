"""`robotrl bench actor --quick` runs both actors end to end and reports both sides."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROBOTRL = shutil.which("robotrl") or str(Path(sys.executable).parent / "robotrl")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_bench_actor_quick_reports_ours_and_lerobots_figures():
    out = subprocess.run(
        [ROBOTRL, "bench", "actor", "--quick"], capture_output=True, text=True, timeout=580, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["bench"] == "actor" and "errors" not in result
    for key in (
        "missed_deadlines",
        "jitter_p99_ms",
        "starved_ticks",
        "lerobot_missed_deadlines",
        "lerobot_jitter_p99_ms",
        "lerobot_starved_ticks",
    ):
        assert result[key] is not None and result[key] >= 0, key
    assert len(result["policy_versions"]) >= 4  # swaps every 2 s over 15 s reached the policy
