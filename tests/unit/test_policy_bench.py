"""`robotrl bench policy` helpers: the zero-copy weight parse agrees with safetensors."""

from __future__ import annotations

import numpy as np
from safetensors.numpy import load, save

from robotrl.bench import BENCHMARKS
from robotrl.bench.policy import safetensors_views


def test_zero_copy_views_match_safetensors_own_parse():
    rng = np.random.default_rng(0)
    tensors = {
        "a.weight": rng.standard_normal((3, 5)).astype(np.float32),
        "b": np.arange(7, dtype=np.int64),
        "c.scalar": np.full((), 2.5, np.float32),
    }
    payload = save(tensors, metadata={"architecture": "x"})
    views = safetensors_views(payload)
    expected = load(payload)
    assert views.keys() == expected.keys()
    for name, arr in expected.items():
        assert views[name].dtype == arr.dtype and np.array_equal(views[name], arr)
        assert not views[name].flags.writeable  # views into the received bytes, not copies


def test_policy_benchmark_is_registered():
    assert BENCHMARKS["policy"] == "robotrl.bench.policy"
