"""Hydra configs: every preset composes and validates; bad values fail naming the field."""

from __future__ import annotations

from importlib import resources

import pytest

from robotrl.config.load import ConfigError, load_config
from robotrl.config.schema import AlgorithmKind, RobotRLConfig, Strategy


def presets() -> list[str]:
    root = resources.files("robotrl.configs")
    out = []
    for group in ("env", "policy", "actor", "learner", "transport"):
        for f in sorted(root.joinpath(group).iterdir(), key=lambda p: p.name):
            if f.name.endswith(".yaml"):
                out.append(f"{group}={f.name.removesuffix('.yaml')}")
    return out


def test_defaults_compose_to_a_typed_config():
    cfg = load_config()
    assert isinstance(cfg, RobotRLConfig)
    assert cfg.actor.strategy is Strategy.prefix
    assert cfg.learner.algorithm is AlgorithmKind.rapi
    assert cfg.env.control_hz == 30.0


@pytest.mark.parametrize("preset", presets())
def test_every_preset_composes_and_validates(preset):
    extra = ["policy.path=/tmp/some_policy"] if preset == "policy=lerobot" else []
    load_config([preset, *extra])


def test_overrides_reach_the_typed_config():
    cfg = load_config(
        ["actor.strategy=blend", "learner=bc", "env=so101_pick_place", "actor.latency.median_s=0.05"]
    )
    assert cfg.actor.strategy is Strategy.blend
    assert cfg.learner.algorithm is AlgorithmKind.bc
    assert cfg.env.id == "robotrl/SO101PickPlace-v0"
    assert cfg.actor.latency.median_s == 0.05


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["env.control_hz=fast"], "env.control_hz"),
        (["actor.strategy=teleport"], "actor.strategy"),
        (["actor.no_such_field=1"], "actor.no_such_field"),
        (["env.control_hz=-5"], "env.control_hz"),
        (["learner.gamma=1.5"], "learner.gamma"),
        (["actor.delay_quantile=1.0"], "actor.delay_quantile"),
        (["policy.max_delay=40"], "policy.max_delay"),
        (["transport.transitions_endpoint=localhost:5"], "transport.transitions_endpoint"),
        (["transport.peer_timeout_s=0.5"], "transport.peer_timeout_s"),
        (["policy=lerobot"], "policy.path"),
        (["learner.device=tpu"], "learner.device"),
        (["policy.noise_scale=-0.5"], "policy.noise_scale"),
        (["policy=lerobot", "policy.path=/x", "policy.noise_scale=0.5"], "policy.noise_scale"),
        (["experiment.eval_noise_scale=3"], "experiment.eval_noise_scale"),
        (
            ["policy=lerobot", "policy.path=/x", "experiment.eval_noise_scale=0"],
            "experiment.eval_noise_scale",
        ),
        (["experiment.algorithms=[rapi,dagger]"], "experiment.algorithms"),
        (["experiment.algorithms=[rapi,bc,rapi]"], "experiment.algorithms"),
        (["env.expert_takeover_ticks=-1"], "env.expert_takeover_ticks"),
        (["learner.intervention_penalty=-1"], "learner.intervention_penalty"),
        (
            ["env=so101_pick_place", "env.privileged_state=false", "env.expert_takeover_ticks=90"],
            "env.expert",
        ),
        (["hardware=so101", "env.expert_takeover_ticks=90"], "env.expert_takeover_ticks"),
        (["actor.execution_horizon=-1"], "actor.execution_horizon"),
    ],
)
def test_bad_value_fails_naming_the_field(overrides, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(overrides)


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as info:
        load_config(["env.control_hz=-1", "learner.batch_size=0"])
    assert "env.control_hz" in str(info.value) and "learner.batch_size" in str(info.value)


def test_unknown_preset_lists_the_available_ones_without_schemas():
    with pytest.raises(ConfigError) as info:
        load_config(["env=nowhere"])
    text = str(info.value)
    assert "so101_reach" in text and "env_schema" not in text


@pytest.mark.parametrize(
    "overrides",
    [
        ["env=so101_reach", "env.expert_takeover_on_miss=true"],
        ["env=so101_reach", "env.expert_takeover_before_miss=true"],
        ["env=so101_pick_place", "env.privileged_state=false", "env.expert_takeover_on_miss=true"],
        ["env=so101_pick_place", "env.privileged_state=false", "env.expert_takeover_before_miss=true"],
        [
            "env=so101_pick_place",
            "env.privileged_state=true",
            "hardware=so101",
            "env.expert_takeover_on_miss=true",
        ],
        ["env=so101_pick_place", "env.privileged_state=true", "env.expert_takeover_miss_wait_ticks=30"],
        ["env=so101_pick_place", "env.privileged_state=true", "env.expert_takeover_reopen_only=true"],
        [
            "env=so101_pick_place",
            "env.privileged_state=true",
            "env.expert_takeover_on_miss=true",
            "env.expert_takeover_miss_wait_ticks=-1",
        ],
        [
            "env=so101_pick_place",
            "env.privileged_state=true",
            "env.expert_takeover_on_miss=true",
            "env.expert_takeover_max_corrections=0",
        ],
    ],
)
def test_a_takeover_on_a_missed_grasp_needs_the_simulated_pick_and_place_with_the_cube_pose(overrides):
    field = overrides[-1].partition("=")[0].replace(".", r"\.")
    with pytest.raises(ConfigError, match=field):
        load_config(overrides)
