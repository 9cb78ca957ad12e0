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
