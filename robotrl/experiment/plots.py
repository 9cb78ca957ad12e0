"""PNG plots of experiments (matplotlib, headless): learning curves and the latency sweep."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from robotrl.core.run_folder import every_actor_progress, read_learner_metrics


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    return plt


def online_history(run_dir: Path) -> list[int]:
    """Per-episode successes of every actor of a fine-tuning run (the policy's own: an episode a
    person or the scripted takeover drove for a while counts as a failure), in episode order."""
    histories = [progress.policy_successes() for progress in every_actor_progress(run_dir)]
    out: list[int] = []
    for i in range(max((len(h) for h in histories), default=0)):
        out += [h[i] for h in histories if i < len(h)]
    return out


def rolling(values: list[int], window: int) -> npt.NDArray[np.float64]:
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return x
    kernel = np.ones(min(window, len(x)))
    return np.convolve(x, kernel, "valid") / len(kernel)


def learning_curves(runs: dict[str, Path], evals: Mapping[str, Mapping[str, Any]], path: Path) -> Path:
    """Online success (rolling) per fine-tuning run with the fixed-seed evaluations, and learner
    losses. ``runs`` are named ``algorithm`` or ``algorithm-runK`` (the demo's repeats: one colour
    per algorithm); ``evals`` holds each algorithm's evaluation, drawn after its first run."""
    plt = _pyplot()
    fig, (ax_s, ax_l) = plt.subplots(1, 2, figsize=(12, 4.5))
    palette = {"rapi": "tab:blue", "bc": "tab:orange", "bc_demos": "tab:green"}
    for name, run_dir in runs.items():
        algorithm, _, repeat = name.partition("-run")
        colour, alpha = palette.get(algorithm), 0.45 if repeat else 1.0  # later runs fainter
        hist = online_history(run_dir)
        window = max(1, min(10, len(hist) // 4 or 1))
        curve = rolling(hist, window)
        if len(curve):
            ends = np.arange(window, len(hist) + 1)  # the episode each rolling window ends at
            ax_s.plot(ends, curve, color=colour, alpha=alpha, label=f"{name}: online")
        if name in evals:
            e = evals[name]
            lo, hi = e["ci95"]
            x = len(hist) + 1
            ax_s.errorbar(
                [x],
                [e["success_rate"]],
                yerr=[[e["success_rate"] - lo], [hi - e["success_rate"]]],
                fmt="o",
                color=colour,
                capsize=4,
                label=f"{name}: eval (95% CI{_pooled(e)})",
            )
        metrics = read_learner_metrics(run_dir)
        for key, style, label in (("policy_loss", "-", "policy loss"), ("q_loss", "--", "critic (Q) loss")):
            points = [(m["group"], m[key]) for m in metrics if key in m]  # none during critic warm-up
            if points:
                xs, ys = zip(*points, strict=True)
                ax_l.plot(xs, ys, color=colour, alpha=alpha, linestyle=style, label=f"{name}: {label}")
    if "pretrained" in evals:
        e = evals["pretrained"]
        lo, hi = e["ci95"]
        ax_s.axhline(e["success_rate"], color="grey", linestyle=":", label="pretrained: eval")
        ax_s.axhspan(lo, hi, color="grey", alpha=0.15)
    ax_s.set(
        xlabel="online episode (all actors)",
        ylabel="success rate",
        ylim=(-0.02, 1.02),
        title="success: online (rolling) and fixed-seed evaluation",
    )
    # below the axes: inside, the legend hides the evaluation points at the curves' right end
    ax_s.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    ax_l.set(xlabel="learner update group", ylabel="loss", title="learner losses")
    if ax_l.get_legend_handles_labels()[0]:
        ax_l.set_yscale("log")
        ax_l.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    else:  # no run logged a loss yet (no learner metrics yet, or still in warm-up)
        ax_l.text(0.5, 0.5, "no learner metrics logged", ha="center", va="center", transform=ax_l.transAxes)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _pooled(summary: Mapping[str, Any]) -> str:
    runs = len(summary.get("runs", []))
    return f", {runs} runs pooled" if runs > 1 else ""


def sweep_plot(rows: list[dict[str, Any]], path: Path) -> Path:
    """Success (with 95% CI) and jerk per latency model, one line per strategy."""
    plt = _pyplot()
    latencies = list(dict.fromkeys(r["latency"] for r in rows))
    strategies = list(dict.fromkeys(r["strategy"] for r in rows))
    fig, (ax_s, ax_j) = plt.subplots(1, 2, figsize=(13, 4.5))
    x = np.arange(len(latencies))
    width = 0.8 / max(1, len(strategies))
    for i, strategy in enumerate(strategies):
        cells = {r["latency"]: r for r in rows if r["strategy"] == strategy}
        rates = np.array([cells[lat]["success_rate"] if lat in cells else np.nan for lat in latencies])
        lo = np.array([cells[lat]["ci95"][0] if lat in cells else np.nan for lat in latencies])
        hi = np.array([cells[lat]["ci95"][1] if lat in cells else np.nan for lat in latencies])
        offset = x - 0.4 + width * (i + 0.5)
        # lists, not arrays: matplotlib reads a (2, 1) array's first entry as a scalar (NumPy warns)
        yerr = [(rates - lo).tolist(), (hi - rates).tolist()]
        ax_s.bar(offset, rates, width, yerr=yerr, capsize=2, label=strategy)
        jerk = [cells[lat]["jerk_rms"] if lat in cells else np.nan for lat in latencies]
        ax_j.plot(x, jerk, marker="o", label=strategy)
    for ax in (ax_s, ax_j):
        ax.set_xticks(x, latencies, rotation=30, ha="right", fontsize=8)
        ax.legend(fontsize=8)
    ax_s.set(ylabel="success rate (95% CI)", ylim=(0, 1.05), title="success by latency model and strategy")
    ax_j.set(ylabel="action jerk RMS", title="smoothness (lower is smoother)")
    ax_j.set_yscale("log")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
