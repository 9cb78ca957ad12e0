"""`robotrl bench sim --quick` runs and ends with its JSON line (speed is the bench's job, not a test's)."""

from __future__ import annotations

import pytest
from quick_bench import quick_bench


@pytest.mark.slow
def test_bench_sim_prints_its_json_line_last():
    result = quick_bench("sim", timeout_s=240)
    for key in ("steps_per_s_state", "steps_per_s_1cam", "steps_per_s_2cam"):
        assert result[key] > 0
    assert result["gl_backend"] in ("osmesa", "egl", "glfw", "default")
