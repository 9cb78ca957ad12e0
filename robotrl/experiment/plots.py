"""PNG plots of experiments (matplotlib, headless): learning curves and the latency sweep."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from robotrl.core.run_folder import every_actor_progress, read_learner_metrics

if TYPE_CHECKING:
    from robotrl.experiment.curve import CurvePoint


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


PALETTE = {"rapi": "tab:blue", "bc": "tab:orange", "bc_demos": "tab:green", "rapi_no_takeover": "tab:purple"}
"""One colour per fine-tuning run of :data:`robotrl.config.experiment.FINETUNE_RUNS`."""
BASELINE_STYLES = (("black", "--"), ("dimgrey", ":"), ("tab:purple", "-."), ("tab:brown", "--"))


def learning_curves(
    runs: dict[str, Path],
    evals: Mapping[str, Mapping[str, Any]],
    path: Path,
    curves: Mapping[str, Sequence[CurvePoint]] | None = None,
    baselines: Mapping[str, tuple[float, Sequence[float]]] | None = None,
) -> Path:
    """Success against online episodes (left) and wall time (middle), and learner losses (right).

    ``runs`` are named ``algorithm`` or ``algorithm-runK`` (the demo's repeats: one colour per
    algorithm, later runs fainter). ``curves`` holds each run's snapshot evaluations
    (:func:`robotrl.experiment.curve.evaluate_snapshots`), drawn with their 95% band; the online
    rolling success stays faint behind them, and ``evals`` holds each algorithm's final evaluation,
    drawn after its first run. ``baselines`` maps a label ("best offline") to (rate, [low, high]):
    a line with its interval as a band on both success panels."""
    plt = _pyplot()
    fig, (ax_e, ax_w, ax_l) = plt.subplots(1, 3, figsize=(18, 4.8))
    curves = curves or {}
    for name, run_dir in runs.items():
        algorithm, _, repeat = name.partition("-run")
        colour, alpha = PALETTE.get(algorithm), 0.45 if repeat else 1.0
        _online_and_final(ax_e, name, run_dir, evals.get(name), colour, alpha, faint=bool(curves.get(name)))
        _snapshot_curve(ax_e, ax_w, name, curves.get(name, ()), colour, alpha)
        _losses(ax_l, name, run_dir, colour, alpha)
    styles = itertools.cycle(BASELINE_STYLES)
    for label, (rate, (low, high)) in (baselines or {}).items():
        colour, style = next(styles)
        for ax in (ax_e, ax_w):
            ax.axhline(rate, color=colour, linestyle=style, linewidth=1.2, label=f"{label}: eval")
            ax.axhspan(low, high, color=colour, alpha=0.08)
    ax_e.set(xlabel="online episodes (all actors)", ylabel="success rate", ylim=(-0.02, 1.02))
    ax_e.set_title("success against online episodes")
    ax_w.set(xlabel="wall time of the run (min)", ylabel="success rate", ylim=(-0.02, 1.02))
    ax_w.set_title("policy snapshots (fixed seeds) against wall time")
    if not any(curves.values()):
        _note(ax_w, "no policy snapshot evaluated")
    ax_l.set(xlabel="learner update group", ylabel="loss", title="learner losses")
    if ax_l.get_legend_handles_labels()[0]:
        ax_l.set_yscale("log")
    else:  # no run logged a loss yet (no learner metrics yet, or still in warm-up)
        _note(ax_l, "no learner metrics logged")
    for ax in (ax_e, ax_w, ax_l):  # below the axes: inside, legends hide the curves' ends
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _online_and_final(
    ax: Any, name: str, run_dir: Path, final: Mapping[str, Any] | None, colour: Any, alpha: float, faint: bool
) -> None:
    """The run's online success (rolling; faint beside snapshot evaluations) and its final evaluation."""
    hist = online_history(run_dir)
    window = max(1, min(10, len(hist) // 4 or 1))
    curve = rolling(hist, window)
    if len(curve):
        ends = np.arange(window, len(hist) + 1)  # the episode each rolling window ends at
        ax.plot(ends, curve, color=colour, alpha=alpha * (0.3 if faint else 1.0), label=f"{name}: online")
    if final is not None:
        lo, hi = final["ci95"]
        rate = final["success_rate"]
        ax.errorbar(
            [len(hist) + 1],
            [rate],
            yerr=[[rate - lo], [hi - rate]],
            fmt="o",
            color=colour,
            capsize=4,
            label=f"{name}: eval (95% CI{_pooled(final)})",
        )


def _snapshot_curve(
    ax_e: Any, ax_w: Any, name: str, points: Sequence[CurvePoint], colour: Any, alpha: float
) -> None:
    """The run's snapshot evaluations with their 95% band, against episodes and wall minutes."""
    if not points:
        return
    rates = [p.success_rate for p in points]
    low, high = [p.ci95[0] for p in points], [p.ci95[1] for p in points]
    for ax, xs in ((ax_e, [p.episodes for p in points]), (ax_w, [p.wall_s / 60 for p in points])):
        ax.plot(xs, rates, marker="s", markersize=4, color=colour, alpha=alpha, label=f"{name}: snapshots")
        ax.fill_between(xs, low, high, color=colour, alpha=0.12 * alpha)


def _losses(ax: Any, name: str, run_dir: Path, colour: Any, alpha: float) -> None:
    metrics = read_learner_metrics(run_dir)
    for key, style, label in (("policy_loss", "-", "policy loss"), ("q_loss", "--", "critic (Q) loss")):
        points = [(m["group"], m[key]) for m in metrics if key in m]  # none during critic warm-up
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, color=colour, alpha=alpha, linestyle=style, label=f"{name}: {label}")


def _note(ax: Any, text: str) -> None:
    """``text`` in the middle of an empty panel."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)


def _pooled(summary: Mapping[str, Any]) -> str:
    runs = len(summary.get("runs", []))
    return f", {runs} runs pooled" if runs > 1 else ""


def sweep_plot(rows: list[dict[str, Any]], path: Path) -> Path:
    """Success (with 95% CI), time to success and jerk per latency model, one bar or line per
    strategy; sync (stop-and-wait) is the reference: a dashed line across each latency's bars."""
    plt = _pyplot()
    latencies = list(dict.fromkeys(r["latency"] for r in rows))
    strategies = list(dict.fromkeys(r["strategy"] for r in rows))
    fig, (ax_s, ax_t, ax_j) = plt.subplots(1, 3, figsize=(17, 4.5))
    x = np.arange(len(latencies))
    width = 0.8 / max(1, len(strategies))

    def series(
        cells: dict[str, dict[str, Any]], key: str, index: int | None = None
    ) -> npt.NDArray[np.float64]:
        def value(lat: str) -> float:
            v = cells[lat][key] if lat in cells else None
            v = v if index is None or v is None else v[index]
            return np.nan if v is None else float(v)

        return np.array([value(lat) for lat in latencies])

    for i, strategy in enumerate(strategies):
        cells = {r["latency"]: r for r in rows if r["strategy"] == strategy}
        rates, lo, hi = series(cells, "success_rate"), series(cells, "ci95", 0), series(cells, "ci95", 1)
        offset = x - 0.4 + width * (i + 0.5)
        # lists, not arrays: matplotlib reads a (2, 1) array's first entry as a scalar (NumPy warns)
        yerr = [(rates - lo).tolist(), (hi - rates).tolist()]
        reference = strategy == "sync"
        style = {"color": "black", "linestyle": "--"} if reference else {}
        ax_s.bar(
            offset, rates, width, yerr=yerr, capsize=2, label=strategy, color="0.6" if reference else None
        )
        if reference:
            ax_s.hlines(rates, x - 0.45, x + 0.45, colors="black", linestyles="--", linewidth=1)
        ax_t.plot(x, series(cells, "mean_time_to_success_s"), marker="o", label=strategy, **style)
        ax_j.plot(x, series(cells, "jerk_rms"), marker="o", label=strategy, **style)
    for ax in (ax_s, ax_t, ax_j):
        ax.set_xticks(x, latencies, rotation=30, ha="right", fontsize=8)
        ax.legend(fontsize=8)
    ax_s.set(ylabel="success rate (95% CI)", ylim=(0, 1.05), title="success (dashed: sync, stop-and-wait)")
    ax_t.set(ylabel="mean time to success (s)", title="time to success (lower is faster)")
    ax_j.set(ylabel="action jerk RMS", title="smoothness (lower is smoother)")
    ax_j.set_yscale("log")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
