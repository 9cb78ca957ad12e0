"""The actor gives a checkpoint no longer a committed prefix than it was trained to continue."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from robotrl.sim import make_env

from robotrl.actor.compose import make_backend, max_prefix
from robotrl.config.load import load_config
from robotrl.policy import build_policy, save_policy


def test_the_config_decides_when_the_policy_does_not_say_or_agrees():
    cfg = load_config(["policy.max_delay=12"])
    assert max_prefix(cfg.policy, None) == 12
    assert max_prefix(cfg.policy, 12) == 12
    assert max_prefix(cfg.policy, 5) == 5  # trained on prefixes up to 5: never given 12


@pytest.mark.timeout(300)
@pytest.mark.parametrize("virtual_time", [True, False], ids=["in-process", "worker"])
def test_a_checkpoints_trained_max_delay_caps_the_prefix_in_both_backends(tmp_path: Path, virtual_time: bool):
    cfg = load_config(
        ["policy=flow_tiny", "env.cameras=[]", f"actor.virtual_time={str(virtual_time).lower()}"]
    )
    env = make_env(cfg.env)
    try:
        save_policy(build_policy(dataclasses.replace(cfg.policy, max_delay=3), env.spec), tmp_path / "policy")
        cfg.policy.path = str(tmp_path / "policy")
        assert cfg.policy.max_delay != 3
        backend, horizon, cap = make_backend(cfg, env.spec, online=False)
        backend.close()
    finally:
        env.close()
    assert (horizon, cap) == (cfg.policy.horizon, 3)
