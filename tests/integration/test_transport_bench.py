"""The transport benchmarks run end to end and report what the issue asks for (speed is theirs to measure)."""

from __future__ import annotations

import pytest
from quick_bench import quick_bench


@pytest.mark.slow
def test_bench_transport_loses_nothing_and_reports_every_field():
    result = quick_bench("transport", timeout_s=600)
    assert result["lost"] == 0
    for key in ("state_tps", "image_tps", "ratio_vs_raw_zmq", "lerobot_image_tps"):
        assert float(result[key]) > 0  # type: ignore[arg-type]
    ratios = ("state", "state_same_messages", "image")
    assert result["ratio_vs_raw_zmq"] == min(result[f"{name}_ratio_vs_raw_zmq"] for name in ratios)
    assert int(result["state_batches_joined"]) > 1  # a state batch is far below transport.coalesce_kb
    # A ratio and the transitions/s beside it come from one round.
    state_tps, raw_tps = (float(result[k]) for k in ("state_tps", "raw_zmq_state_tps"))  # type: ignore[arg-type]
    assert abs(float(result["state_ratio_vs_raw_zmq"]) - state_tps / raw_tps) < 0.002  # type: ignore[arg-type]


@pytest.mark.slow
def test_bench_hotswap_activates_every_publication_and_reports_every_field():
    result = quick_bench("hotswap", timeout_s=600)
    assert result["swaps"] == 8
    figures = ("publish_call", "publish_to_installed", "publish_to_active", "publish_to_acting")
    for key in (
        "lerobot_push_ms_p50",
        "inference_ms",
        *(
            f"{path}_{figure}_ms_{q}"
            for path in ("shm", "socket")
            for figure in figures
            for q in ("p50", "p99")
        ),
    ):
        assert float(result[key]) > 0  # type: ignore[arg-type]
    for path in ("shm", "socket"):  # installed before its first chunk ran, which came before it acted
        installed, active, acting = (
            float(result[f"{path}_publish_to_{part}_ms_p50"])  # type: ignore[arg-type]
            for part in ("installed", "active", "acting")
        )
        assert installed <= active <= acting
    for key in ("publish_to_installed_ms_p99", "publish_to_active_ms_p99", "publish_to_acting_ms_p99"):
        assert result[key] == max(result[f"shm_{key}"], result[f"socket_{key}"])  # type: ignore[type-var]
    assert isinstance(result["missed_deadlines"], int)
