"""`robotrl eval` on the simulated SO-101, as a user runs it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROBOTRL = shutil.which("robotrl") or str(Path(sys.executable).parent / "robotrl")


def run_eval(tmp_path: Path, *overrides: str) -> dict:
    cmd = [
        ROBOTRL,
        "eval",
        "policy=flow_tiny",
        "env.cameras=[]",
        "env.max_episode_ticks=60",
        f"run_dir={tmp_path}",
        *overrides,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "success rate" in out.stdout
    return json.loads((tmp_path / "eval_summary.json").read_text())


@pytest.mark.timeout(300)
def test_eval_in_virtual_time_writes_its_summary(tmp_path):
    summary = run_eval(
        tmp_path, "actor.episodes=2", "actor.strategy=blend", f"actor.rerun_path={tmp_path}/eval.rrd"
    )
    assert (tmp_path / "eval.rrd").stat().st_size > 10_000
    assert summary["episodes"] == 2 and 0 < summary["ticks"] <= 120  # a lucky episode may end early
    assert summary["strategy"] == "blend" and summary["latency"] == "lognormal"
    assert summary["starved_ticks"] == 0 and summary["failures"] == []
    assert summary["mean_delay_ticks"] >= 1
    rows = [json.loads(line) for line in (tmp_path / "eval_episodes.jsonl").read_text().splitlines()]
    assert [(r["episode"], r["seed"]) for r in rows] == [(0, 0), (1, 1)]  # actor.seed defaults to 0
    assert sum(r["ticks"] for r in rows) == summary["ticks"]
    assert sum(summary["outcomes"].values()) == 2  # the sim says how each episode ended
    assert sorted(summary["outcomes"]) == sorted({r["outcome"] for r in rows})


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_eval_in_wall_clock_time_runs_the_policy_in_a_worker(tmp_path):
    summary = run_eval(tmp_path, "actor.episodes=1", "actor.virtual_time=false")
    assert summary["latency"] == "wall-clock" and 0 < summary["ticks"] <= 60
    assert "jitter_p99_ms" in summary and summary["failures"] == []


@pytest.mark.timeout(300)
def test_an_inference_slower_than_half_a_chunk_is_explained_in_the_summary(tmp_path):
    # 600 ms at 30 Hz is 18 ticks; a 32-step chunk then leaves 14: one inference at a time, the
    # robot must hold.
    summary = run_eval(
        tmp_path,
        "actor.episodes=1",
        "actor.max_in_flight=1",
        "policy.max_delay=24",
        "actor.latency.kind=constant",
        "actor.latency.median_s=0.6",
    )
    assert summary["starved_ticks"] > 0
    assert "policy.horizon (>= 38)" in summary["diagnosis"]
    assert "actor.max_in_flight" in summary["diagnosis"]
    pipelined = run_eval(
        tmp_path / "pipelined",
        "actor.episodes=1",
        "policy.max_delay=24",
        "actor.latency.kind=constant",
        "actor.latency.median_s=0.6",
    )
    assert pipelined["starved_ticks"] == 0 and "diagnosis" not in pipelined


@pytest.mark.timeout(300)
def test_a_scripted_takeover_is_recorded_as_intervention_ticks(tmp_path):
    summary = run_eval(
        tmp_path,
        "env=so101_pick_place",
        "env.privileged_state=true",
        "env.takeover.ticks=10",
        "actor.episodes=1",
    )
    # 60 ticks in all; the expert drives from tick 10 and needs longer than 50 to place the cube
    assert summary["ticks"] == 60 and summary["intervention_ticks"] == 50
    (row,) = [json.loads(line) for line in (tmp_path / "eval_episodes.jsonl").read_text().splitlines()]
    assert row["intervention_ticks"] == 50


@pytest.mark.timeout(300)
def test_a_delay_model_beyond_what_the_policy_was_trained_to_continue_is_refused(tmp_path):
    # lognormal 0.35 s: its 90% quantile is 0.51 s, 16 ticks at 30 Hz, > policy.max_delay 12.
    cmd = [ROBOTRL, "eval", "policy=flow_tiny", "env.cameras=[]", "actor.episodes=1", f"run_dir={tmp_path}"]
    out = subprocess.run(
        [*cmd, "actor.latency.median_s=0.35", "actor.latency.sigma=0.3"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 2, out.stderr[-3000:]
    assert "commit 16 ticks" in out.stderr and "the 12 the policy was trained to continue" in out.stderr
    assert "Traceback" not in out.stderr
