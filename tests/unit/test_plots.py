"""The demo's and the sweep's plots are written without warnings at their smallest sizes."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from robotrl.experiment.plots import learning_curves, sweep_plot


def _is_png(path: Path) -> bool:
    return path.read_bytes()[:4] == b"\x89PNG"


def test_a_sweep_of_one_latency_plots_without_warnings(tmp_path: Path):
    rows = [
        {
            "latency": "constant 0 ms",
            "strategy": s,
            "success_rate": 0.5,
            "ci95": [0.4, 0.6],
            "jerk_rms": 1.0,
            "mean_time_to_success_s": t,
        }
        for s, t in (("sync", 2.5), ("prefix", None))  # None: no episode succeeded
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _is_png(sweep_plot(rows, tmp_path / "sweep.png"))


def test_learning_curves_of_a_run_without_learner_metrics_plot_without_warnings(tmp_path: Path):
    run = tmp_path / "finetune_bc"
    run.mkdir()
    history = [[i % 2, i] for i in range(12)]
    (run / "actor_actor-0_progress.json").write_text(json.dumps({"history": history}))
    evals = {
        "bc": {"success_rate": 0.6, "ci95": [0.5, 0.7]},
        "pretrained": {"success_rate": 0.4, "ci95": [0.3, 0.5]},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _is_png(learning_curves({"bc": run}, evals, tmp_path / "curve.png"))
