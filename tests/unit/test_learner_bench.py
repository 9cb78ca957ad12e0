"""`robotrl bench learner` runs end to end (with the test policy; the built-in one lives on its branch)."""

from __future__ import annotations

import json

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
