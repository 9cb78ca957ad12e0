"""Inference-time models for virtual-time simulation.

Each model draws one inference duration in seconds from the caller's generator only,
so a seeded run replays the same delays; the actor turns seconds into ticks. Built
from :class:`~robotrl.config.latency.LatencyConfig` by :func:`build_latency_model`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robotrl.config.latency import LatencyConfig, LatencyKind
from robotrl.core.protocols import LatencyModel


@dataclass(frozen=True, slots=True)
class ConstantLatency:
    """Every inference takes exactly ``seconds``."""

    seconds: float

    def sample_seconds(self, rng: np.random.Generator) -> float:
        return self.seconds


@dataclass(frozen=True, slots=True)
class NormalLatency:
    """Normal around ``mean_s`` with standard deviation ``std_s``, clipped at zero."""

    mean_s: float
    std_s: float

    def sample_seconds(self, rng: np.random.Generator) -> float:
        return max(0.0, float(rng.normal(self.mean_s, self.std_s)))


@dataclass(frozen=True, slots=True)
class LognormalLatency:
    """``median_s * exp(sigma * N(0, 1))``: the right-skewed shape of real inference times."""

    median_s: float
    sigma: float

    def sample_seconds(self, rng: np.random.Generator) -> float:
        return self.median_s * math.exp(self.sigma * float(rng.standard_normal()))


@dataclass(frozen=True, slots=True)
class SpikeMixtureLatency:
    """Mostly lognormal, but with probability ``spike_prob`` a spike of ``spike_s``.

    Models garbage collections, weight loads and contention: the rare slow inference
    that breaks a scheduler tuned on the typical one.
    """

    base: LognormalLatency
    spike_prob: float
    spike_s: float

    def sample_seconds(self, rng: np.random.Generator) -> float:
        typical = self.base.sample_seconds(rng)  # always drawn, so the stream does not shift
        return self.spike_s if rng.random() < self.spike_prob else typical


@dataclass(frozen=True, slots=True)
class EmpiricalLatency:
    """Resamples measured inference times (seconds), uniformly with replacement."""

    samples: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.samples:
            raise ValueError("empirical latency profile holds no samples")
        bad = [s for s in self.samples if not math.isfinite(s) or s < 0]
        if bad:
            raise ValueError(f"empirical latency profile has {len(bad)} negative or non-finite samples")

    def sample_seconds(self, rng: np.random.Generator) -> float:
        return self.samples[int(rng.integers(len(self.samples)))]


def load_profile(path: str | Path) -> tuple[float, ...]:
    """Inference times in seconds from ``path``.

    Accepted: JSON (a list of numbers, or an object whose ``"seconds"`` key holds one),
    ``.npy`` (a 1-D float array), or text with one number per line (``#`` comments allowed).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"latency profile {p} does not exist")
    if p.suffix == ".npy":
        values = np.load(p, allow_pickle=False).astype(np.float64).ravel().tolist()
    elif p.suffix == ".json":
        data = json.loads(p.read_text())
        values = data.get("seconds") if isinstance(data, dict) else data
        if not isinstance(values, list) or not all(isinstance(v, int | float) for v in values):
            raise ValueError(f"latency profile {p}: expected a list of numbers (or {{'seconds': [...]}})")
    else:
        values = []
        for n, line in enumerate(p.read_text().splitlines(), 1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            try:
                values.append(float(text))
            except ValueError:
                raise ValueError(f"latency profile {p}:{n}: not a number: {text!r}") from None
    return tuple(float(v) for v in values)


def quantile_seconds(model: LatencyModel, quantile: float, draws: int = 20_000) -> float:
    """The model's ``quantile`` of inference time, from a fixed-seed sample of ``draws`` (exact
    for a constant model): the same answer every time it is asked."""
    rng = np.random.default_rng(0)
    samples = np.fromiter((model.sample_seconds(rng) for _ in range(draws)), np.float64, draws)
    return float(np.quantile(samples, quantile, method="inverted_cdf"))


def expected_delay_ticks(model: LatencyModel, quantile: float, control_hz: float) -> int:
    """The delay, in ticks, an actor with this model comes to expect (its delay estimate is the
    ``quantile`` of recent delays): what the prefix strategy commits to the policy."""
    from robotrl.actor.latency import seconds_to_ticks

    return seconds_to_ticks(quantile_seconds(model, quantile), control_hz)


def build_latency_model(cfg: LatencyConfig) -> LatencyModel:
    """The :class:`LatencyModel` that ``cfg`` describes.

    ``median_s`` is the constant value, the normal's mean, and the lognormal's median;
    ``sigma`` is the lognormal's log-space standard deviation and, for ``normal``, the
    standard deviation relative to the mean.
    """
    match cfg.kind:
        case LatencyKind.constant:
            return ConstantLatency(cfg.median_s)
        case LatencyKind.normal:
            return NormalLatency(cfg.median_s, cfg.sigma * cfg.median_s)
        case LatencyKind.lognormal:
            return LognormalLatency(cfg.median_s, cfg.sigma)
        case LatencyKind.spike_mixture:
            return SpikeMixtureLatency(LognormalLatency(cfg.median_s, cfg.sigma), cfg.spike_prob, cfg.spike_s)
        case LatencyKind.empirical:
            if not cfg.profile_path:
                raise ValueError(
                    "actor.latency.profile_path: the empirical latency model needs a profile file"
                )
            return EmpiricalLatency(load_profile(cfg.profile_path))
    raise ValueError(f"unknown latency kind {cfg.kind!r}")
