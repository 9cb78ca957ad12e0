"""Latency models reproduce their distributions, from a seeded generator only."""

from __future__ import annotations

import json

import numpy as np
import pytest
from robotrl.sim.latency import build_latency_model, load_profile

from robotrl.config.latency import LatencyConfig, LatencyKind
from robotrl.core.protocols import LatencyModel

N = 40_000


def draws(cfg: LatencyConfig, seed: int = 0, n: int = N) -> np.ndarray:
    model = build_latency_model(cfg)
    assert isinstance(model, LatencyModel)
    rng = np.random.default_rng(seed)
    return np.array([model.sample_seconds(rng) for _ in range(n)])


def test_constant_is_exact():
    x = draws(LatencyConfig(kind=LatencyKind.constant, median_s=0.1), n=100)
    assert np.all(x == 0.1)


def test_normal_matches_mean_and_std():
    x = draws(LatencyConfig(kind=LatencyKind.normal, median_s=0.2, sigma=0.1))
    assert x.mean() == pytest.approx(0.2, rel=0.01)
    assert x.std() == pytest.approx(0.02, rel=0.03)
    assert np.quantile(x, 0.975) == pytest.approx(0.2 + 1.96 * 0.02, rel=0.01)


def test_normal_never_negative():
    assert draws(LatencyConfig(kind=LatencyKind.normal, median_s=0.01, sigma=2.0)).min() >= 0


def test_lognormal_matches_median_and_quantiles():
    x = draws(LatencyConfig(kind=LatencyKind.lognormal, median_s=0.15, sigma=0.3))
    assert np.median(x) == pytest.approx(0.15, rel=0.02)
    assert np.quantile(x, 0.9) == pytest.approx(0.15 * np.exp(0.3 * 1.2816), rel=0.02)
    assert x.mean() == pytest.approx(0.15 * np.exp(0.3**2 / 2), rel=0.02)


def test_spike_mixture_has_the_spike_share_and_typical_body():
    cfg = LatencyConfig(
        kind=LatencyKind.spike_mixture, median_s=0.05, sigma=0.1, spike_prob=0.05, spike_s=1.0
    )
    x = draws(cfg)
    assert (x == 1.0).mean() == pytest.approx(0.05, abs=0.005)
    assert np.median(x[x < 1.0]) == pytest.approx(0.05, rel=0.02)


def test_empirical_resamples_the_profile(tmp_path):
    measured = [0.05] * 70 + [0.1] * 20 + [0.5] * 10
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"seconds": measured}))
    x = draws(LatencyConfig(kind=LatencyKind.empirical, profile_path=str(path)))
    assert set(np.unique(x)) == {0.05, 0.1, 0.5}
    assert (x == 0.5).mean() == pytest.approx(0.1, abs=0.01)
    assert np.quantile(x, 0.5) == 0.05


def test_profile_formats_agree(tmp_path):
    values = [0.01, 0.02, 0.5]
    (tmp_path / "a.txt").write_text("# seconds\n0.01\n0.02\n\n0.5\n")
    (tmp_path / "b.json").write_text(json.dumps(values))
    np.save(tmp_path / "c.npy", np.array(values))
    for name in ("a.txt", "b.json", "c.npy"):
        assert load_profile(tmp_path / name) == tuple(values)


@pytest.mark.parametrize(
    ("content", "message"),
    [("0.1\nfast\n", "not a number"), ("", "no samples"), ("0.1\n-0.2\n", "negative")],
)
def test_bad_profiles_are_refused_clearly(tmp_path, content, message):
    path = tmp_path / "p.txt"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        build_latency_model(LatencyConfig(kind=LatencyKind.empirical, profile_path=str(path)))


def test_same_seed_same_delays():
    cfg = LatencyConfig(kind=LatencyKind.spike_mixture)
    assert np.array_equal(draws(cfg, seed=3, n=200), draws(cfg, seed=3, n=200))
    assert not np.array_equal(draws(cfg, seed=3, n=200), draws(cfg, seed=4, n=200))
