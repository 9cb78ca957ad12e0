"""`robotrl bench learner` runs end to end (with the test policy; the built-in one lives on its branch)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from learner_doubles import MLPChunkPolicy

from robotrl.bench import learner as bench


@pytest.mark.slow
def test_learner_bench_reports_updates_and_ingest_as_its_last_json_line(capsys):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = bench.run(
            quick=True,
            policy_factory=lambda cfg, spec: MLPChunkPolicy(
                spec.state_dim, cfg.policy.horizon, spec.action_dim
            ),
        )
    finally:
        torch.set_num_threads(threads)
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last == result and last["bench"] == "learner"
    assert last["updates_per_s"] > 0 and last["ingest_tps"] > 0 and last["ingest_tps_alone"] > 0
    figures = (
        "updates_per_s_alone",
        "updates_per_s_with_30hz_actor",
        "updates_per_s_while_ingesting",
        "ratio_30hz_actor",
        "ratio_full_speed_ingest",
        "ingest_tps_30hz",
    )
    assert all(last[name] > 0 for name in figures), {name: last.get(name) for name in figures}
    weaker = min(("ratio_30hz_actor", "ratio_full_speed_ingest"), key=lambda name: last[name])
    assert last["headline"] == weaker and last["headline_ratio"] == last[weaker]
    assert last["journal_refusals"] == 0  # every phase timed updates beside real ingest
    assert last["critic_cameras"] == 2  # the critic reads both cameras (the test policy reads none)


@pytest.mark.slow
@pytest.mark.timeout(840)
def test_learner_bench_with_two_ranks_compares_them_with_one_and_splits_rank_zeros_time():
    # Real ranks (spawned processes, gloo) on the bench's own policy: what a user runs.
    out = subprocess.run(
        [sys.executable, "-m", "robotrl.cli", "bench", "learner", "--ranks", "2", "--quick"],
        capture_output=True,
        text=True,
        timeout=780,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    last = json.loads(out.stdout.strip().splitlines()[-1])
    assert last["bench"] == "learner_ranks" and last["ranks"] == 2
    one, two = last["samples_per_s_1_rank"], last["samples_per_s_2_ranks"]
    assert one > 0 and two > 0 and last["speedup"] == pytest.approx(two / one, rel=0.01)
    assert (
        last["headline_ratio"] == last["scaling_efficiency"] == pytest.approx(last["speedup"] / 2, abs=0.001)
    )
    # Only two ranks scatter shards and all-reduce; rank 0 of one process does neither.
    assert last["scatter_ms_2_ranks"] > 0 and last["allreduce_ms_2_ranks"] > 0
    assert last["scatter_ms_1_rank"] < last["scatter_ms_2_ranks"] and last["allreduce_ms_1_rank"] == 0
    assert "Grad strides" not in out.stderr  # the 1x1 convolutions' stride notice stays quiet
    # Sharding the policy (FSDP2): each of two ranks holds half of it between updates.
    assert last["updates_per_s_2_ranks_sharded"] > 0 and last["policy_held_share_sharded"] == pytest.approx(
        0.5, abs=0.01
    )
    # Each rank sampling its own replica: it trains, and nothing is scattered.
    assert last["updates_per_s_2_ranks_local_sampling"] > 0 and last["scatter_ms_2_ranks_local_sampling"] == 0
    assert last["local_sampling_over_scatter"] == pytest.approx(
        last["updates_per_s_2_ranks_local_sampling"] / last["updates_per_s_2_ranks"], rel=0.05
    )
