"""`robotrl experiment experiment=latency_sweep` on a small grid: every cell runs on the same
seeds, and the table, JSON and plot are written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from robotrl.sim import make_env

from robotrl.config.load import load_config
from robotrl.core.run_folder import STEP_STAMP
from robotrl.experiment.sweep import run_sweep
from robotrl.policy import build_policy, save_policy


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_latency_sweep_writes_one_row_per_cell_and_a_plot(tmp_path: Path):
    base = ["env=so101_reach", "env.cameras=[]", "env.max_episode_ticks=40", "policy=flow_tiny"]
    env = make_env(load_config(base).env)
    policy = build_policy(load_config(base).policy, env.spec)
    env.close()
    save_policy(policy, tmp_path / "policy")
    cfg = load_config(
        [
            *base,
            "experiment=latency_sweep",
            f"experiment.output_dir={tmp_path}",
            f"experiment.checkpoint={tmp_path / 'policy'}",
            "experiment.latencies=[constant:0,constant:0.4]",
            "experiment.strategies=[sync,prefix]",
            "experiment.sweep_episodes=2",
        ]
    )
    assert run_sweep(cfg) == 0
    out = tmp_path / "latency_sweep"
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert [(r["latency"], r["strategy"]) for r in rows] == [
        ("constant:0", "sync"),
        ("constant:0", "prefix"),
        ("constant:0.4", "sync"),
        ("constant:0.4", "prefix"),
    ]
    assert all(r["episodes"] == 2 for r in rows)
    # 400 ms at 30 Hz is 12 ticks per inference: delays are measured, not assumed.
    assert rows[3]["mean_delay_ticks"] == pytest.approx(12, abs=1)
    assert rows[1]["mean_delay_ticks"] in (None, 0.0)
    assert (out / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    # Each cell is its own `robotrl eval` with a log; a second sweep reruns none of them.
    stamps = sorted((out / "cells").glob(f"*/{STEP_STAMP}"))
    assert len(stamps) == 4 and all((s.parent / "output.log").is_file() for s in stamps)
    runs = [json.loads(s.read_text())["run"] for s in stamps]
    assert run_sweep(cfg) == 0
    assert [json.loads(s.read_text())["run"] for s in stamps] == runs
    assert json.loads((out / "results.json").read_text())["rows"] == rows


def pretraining_sweep(tmp_path: Path, *overrides: str):
    """A tiny sweep that records its demonstrations and pretrains its policies (one latency)."""
    return load_config(
        [
            "experiment=latency_sweep",
            f"experiment.output_dir={tmp_path}",
            "experiment.demos=2",
            "experiment.pretrain_steps=20",
            "pretrain.val_every=10",
            "pretrain.checkpoint_every=10",
            "pretrain.warmup_steps=5",
            "env.max_episode_ticks=30",
            "experiment.latencies=[constant:0.2]",
            *overrides,
        ]
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_without_a_checkpoint_the_sweep_records_and_pretrains_on_the_avoid_task(tmp_path: Path):
    cfg = pretraining_sweep(
        tmp_path,
        "experiment.seeds=1",
        "experiment.strategies=[naive_async,prefix]",
        "experiment.sweep_episodes=1",
    )
    assert cfg.env.id == "robotrl/SO101Avoid-v0" and cfg.env.cameras == []
    assert run_sweep(cfg) == 0
    assert (tmp_path / "demos" / "meta" / "info.json").is_file()
    result = json.loads((tmp_path / "latency_sweep" / "results.json").read_text())
    assert result["policies"] == [str(tmp_path / "pretrain" / "policy")]
    assert [r["strategy"] for r in result["rows"]] == ["naive_async", "prefix"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_seeds_pretrain_one_policy_each_and_the_table_pools_their_cells(tmp_path: Path):
    cfg = pretraining_sweep(
        tmp_path, "experiment.seeds=2", "experiment.strategies=[sync,prefix]", "experiment.sweep_episodes=2"
    )
    assert run_sweep(cfg) == 0
    result = json.loads((tmp_path / "latency_sweep" / "results.json").read_text())
    first, second = (tmp_path / "pretrain" / "policy", tmp_path / f"pretrain_seed{cfg.seed + 1}" / "policy")
    assert result["policies"] == [str(first), str(second)]
    assert (first / "model.safetensors").read_bytes() != (second / "model.safetensors").read_bytes()
    assert [(r["strategy"], r["policy"]) for r in result["seed_rows"]] == [
        ("sync", 0),
        ("prefix", 0),
        ("sync", 1),
        ("prefix", 1),
    ]
    for row in result["rows"]:
        cells = [r for r in result["seed_rows"] if r["strategy"] == row["strategy"]]
        assert row["episodes"] == 4 and row["runs"] == [c["success_rate"] for c in cells]
        assert row["success_rate"] == sum(c["success_rate"] for c in cells) / 2
