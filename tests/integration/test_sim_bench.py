"""`robotrl bench sim --quick` runs and ends with its JSON line (speed is the bench's job, not a test's)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_bench_sim_prints_its_json_line_last():
    out = subprocess.run(
        [sys.executable, "-m", "robotrl.cli", "bench", "sim", "--quick"],
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["bench"] == "sim"
    for key in ("steps_per_s_state", "steps_per_s_1cam", "steps_per_s_2cam"):
        assert result[key] > 0
    assert result["gl_backend"] in ("osmesa", "egl", "glfw", "default")
