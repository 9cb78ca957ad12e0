"""Core types: invariants that every part relies on."""

from __future__ import annotations

import numpy as np
import pytest

from robotrl.core.types import ActionChunk, EnvSpec, WeightUpdate, weights_digest


def spec(**kw: object) -> EnvSpec:
    base: dict[str, object] = {
        "name": "t",
        "action_names": ("a", "b"),
        "action_low": (-1.0, 0.0),
        "action_high": (1.0, 2.0),
        "state_names": ("q0",),
    }
    base.update(kw)
    return EnvSpec(**base)  # type: ignore[arg-type]


def test_env_spec_dimensions_and_bounds():
    s = spec(camera_shapes={"front": (96, 96, 3)}, control_hz=50.0)
    assert (s.action_dim, s.state_dim, s.dt) == (2, 1, 0.02)
    lo, hi = s.action_bounds()
    assert lo.dtype == np.float32 and list(hi) == [1.0, 2.0]


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"action_low": (-1.0,)}, "one per action name"),
        ({"action_low": (2.0, 0.0)}, "exceeds"),
        ({"control_hz": 0.0}, "control_hz"),
        ({"camera_shapes": {"front": (96, 96)}}, "HxWx3"),
    ],
)
def test_env_spec_rejects_inconsistent_values(kw, match):
    with pytest.raises(ValueError, match=match):
        spec(**kw)


def test_chunk_delay_is_ticks_consumed_and_actions_are_indexed_by_tick():
    actions = np.arange(8, dtype=np.float32).reshape(4, 2)
    chunk = ActionChunk(
        chunk_id=1, actions=actions, obs_tick=10, ready_tick=13, start_tick=10, policy_version=2
    )
    assert chunk.delay_ticks == 3
    assert chunk.end_tick == 14
    assert chunk.action_for(9) is None and chunk.action_for(14) is None
    np.testing.assert_array_equal(chunk.action_for(12), [4.0, 5.0])


def test_chunk_rejects_impossible_stamps():
    with pytest.raises(ValueError, match="before obs_tick"):
        ActionChunk(1, np.zeros((4, 2), np.float32), obs_tick=5, ready_tick=4, start_tick=5, policy_version=0)
    with pytest.raises(ValueError, match="prefix_len"):
        ActionChunk(1, np.zeros((4, 2), np.float32), 0, 0, 0, 0, prefix_len=5)
    with pytest.raises(ValueError, match="H, action_dim"):
        ActionChunk(1, np.zeros(4, np.float32), 0, 0, 0, 0)


def test_digest_covers_names_dtypes_shapes_and_values():
    w = {"a": np.arange(6, dtype=np.float32).reshape(2, 3)}
    d = weights_digest(w)
    assert d == weights_digest({"a": w["a"].copy()})
    assert d != weights_digest({"b": w["a"]})
    assert d != weights_digest({"a": w["a"].reshape(3, 2)})
    assert d != weights_digest({"a": w["a"].view(np.int32)})
    changed = w["a"].copy()
    changed[1, 2] += 1
    assert d != weights_digest({"a": changed})


def test_weight_update_build_and_verify():
    u = WeightUpdate.build(4, {"a": np.ones(3, np.float32)})
    assert u.digest_matches() and u.nbytes == 12
    with pytest.raises(ValueError, match="version"):
        WeightUpdate.build(-1, {})
    with pytest.raises(ValueError, match="subset"):
        WeightUpdate.build(1, {}, subset="half")
