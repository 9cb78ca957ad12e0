"""Inference latency: the model the actor runs in virtual time (``actor.latency``), its
``kind:median_s`` shorthand, and the measured profile `robotrl profile-latency` writes
(the ``profile`` group)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from robotrl.config.bounds import bounds


class LatencyKind(Enum):
    """Inference-time model used in virtual time (ignored in wall-clock mode)."""

    constant = "constant"
    normal = "normal"  # mean median_s, standard deviation sigma * median_s
    lognormal = "lognormal"
    spike_mixture = "spike_mixture"
    empirical = "empirical"


@dataclass
class LatencyConfig:
    kind: LatencyKind = LatencyKind.lognormal
    """Shape of the inference-time distribution."""
    median_s: float = field(default=0.15, metadata=bounds(ge=0))
    """Median inference time in seconds (constant: the value itself); > 0 but for constant."""
    sigma: float = field(default=0.3, metadata=bounds(ge=0))
    """Log-space standard deviation (lognormal, spike_mixture); std relative to median_s (normal)."""
    spike_prob: float = field(default=0.02, metadata=bounds(ge=0, le=1))
    """Probability of a spike (spike_mixture)."""
    spike_s: float = 0.6
    """Duration of a spike in seconds (spike_mixture)."""
    profile_path: str | None = None
    """Latency profile file recorded by `robotrl profile-latency` (empirical)."""


def parse_latency(spec: str) -> tuple[LatencyKind, float]:
    """'kind:median_s' (e.g. 'lognormal:0.15') -> (kind, median_s); ValueError names what is wrong."""
    kind, sep, median = spec.partition(":")
    if not sep:
        raise ValueError(f"{spec!r} is not kind:median_s (e.g. constant:0.1)")
    try:
        parsed = LatencyKind(kind)
    except ValueError:
        raise ValueError(f"{spec!r}: unknown latency kind {kind!r}") from None
    if parsed is LatencyKind.empirical:
        raise ValueError(f"{spec!r}: the empirical model needs a profile file, not a median")
    value = float(median)
    if value < 0 or (value == 0 and parsed is not LatencyKind.constant):
        raise ValueError(f"{spec!r}: the median must be > 0 (>= 0 for constant)")
    return parsed, value


@dataclass
class ProfileConfig:
    samples: int = field(default=200, metadata=bounds(gt=0))
    """Inferences timed for the profile (after the warm-up)."""
    warmup: int = field(default=10, metadata=bounds(ge=0))
    """Inferences run first and not timed (lazy initialisation, caches, CUDA kernels)."""
    delay: int = field(default=4, metadata=bounds(ge=0))
    """Committed prefix length given to each inference (clipped to policy.max_delay)."""
    output: str = field(default="runs/latency_profile.json", metadata=bounds(nonblank=True))
    """Profile file to write; replay it with actor.latency.kind=empirical actor.latency.profile_path=..."""
