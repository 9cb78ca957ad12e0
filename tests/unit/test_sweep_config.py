"""The default latency sweep: its policy's training-time RTC covers every constant delay it
sweeps, and each chunk still runs after the largest one (else prefix would be cut short)."""

from __future__ import annotations

from robotrl.config.latency import LatencyKind, parse_latency
from robotrl.config.load import load_config


def test_the_committed_prefix_covers_the_largest_constant_delay():
    cfg = load_config(["experiment=latency_sweep"])
    assert cfg.env.id == "robotrl/SO101Avoid-v0"
    delays = [
        round(median * cfg.env.control_hz)
        for kind, median in map(parse_latency, cfg.experiment.latencies)
        if kind is LatencyKind.constant
    ]
    assert max(delays) >= 24  # a latency where naive_async's hand-overs cut through the obstacle
    assert max(delays) <= cfg.policy.max_delay < cfg.policy.horizon
    assert {"naive_async", "prefix"} <= set(cfg.experiment.strategies)
