"""The transport benchmarks run end to end and report what the issue asks for (speed is theirs to measure)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def bench(name: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-m", "robotrl.cli", "bench", name, "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["bench"] == name
    return result


@pytest.mark.slow
def test_bench_transport_loses_nothing_and_reports_every_field():
    result = bench("transport")
    assert result["lost"] == 0
    for key in ("state_tps", "image_tps", "ratio_vs_raw_zmq", "lerobot_image_tps"):
        assert float(result[key]) > 0  # type: ignore[arg-type]


@pytest.mark.slow
def test_bench_hotswap_activates_every_publication_and_reports_every_field():
    result = bench("hotswap")
    assert result["swaps"] == 8
    for key in ("publish_to_active_ms_p50", "publish_to_active_ms_p99", "lerobot_push_ms_p50"):
        assert float(result[key]) > 0  # type: ignore[arg-type]
    assert isinstance(result["missed_deadlines"], int)
