"""Hydra configs: every preset composes and validates; bad values fail naming the field."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from robotrl.config.actor import Strategy
from robotrl.config.learner import AlgorithmKind
from robotrl.config.load import ConfigError, load_config
from robotrl.config.renames import RENAMED
from robotrl.config.schema import RobotRLConfig


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
        (["env.takeover.ticks=-1"], "env.takeover.ticks"),
        (["learner.rapi.intervention_penalty=-1"], "learner.rapi.intervention_penalty"),
        (["hardware=so101", "env.takeover.ticks=90"], "env.takeover.ticks"),
        (["actor.execution_horizon=-1"], "actor.execution_horizon"),
    ],
)
def test_bad_value_fails_naming_the_field(overrides, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(overrides)


def test_a_preset_with_an_evaluation_setting_records_with_the_expert():
    """`robotrl record experiment=demo_pixels policy.kind=expert`: the preset's
    experiment.eval_noise_scale is no problem for a policy that is never evaluated."""
    cfg = load_config(["experiment=demo_pixels", "policy.kind=expert"])
    assert cfg.experiment.eval_noise_scale == 0.0


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as info:
        load_config(["env.control_hz=-1", "learner.batch_size=0"])
    assert "env.control_hz" in str(info.value) and "learner.batch_size" in str(info.value)


def test_unknown_preset_lists_the_available_ones_without_schemas():
    with pytest.raises(ConfigError) as info:
        load_config(["env=nowhere"])
    text = str(info.value)
    assert "so101_reach" in text and "env_schema" not in text


PICK_PLACE_WITH_CUBE_POSE = ["env=so101_pick_place", "env.privileged_state=true"]
PICK_PLACE_WITHOUT_CUBE_POSE = ["env=so101_pick_place", "env.privileged_state=false"]


@pytest.mark.parametrize(
    "overrides",
    [
        ["env=so101_reach", "env.takeover.on_miss=true"],
        ["env=so101_reach", "env.takeover.before_miss=true"],
        [*PICK_PLACE_WITH_CUBE_POSE, "hardware=so101", "env.takeover.on_miss=true"],
        [*PICK_PLACE_WITH_CUBE_POSE, "env.takeover.miss_wait_ticks=30"],
        [*PICK_PLACE_WITH_CUBE_POSE, "env.takeover.reopen_only=true"],
        [*PICK_PLACE_WITH_CUBE_POSE, "env.takeover.on_miss=true", "env.takeover.miss_wait_ticks=-1"],
        [*PICK_PLACE_WITH_CUBE_POSE, "env.takeover.on_miss=true", "env.takeover.max_corrections=0"],
    ],
)
def test_a_takeover_on_a_missed_grasp_needs_the_simulated_pick_and_place(overrides):
    field = overrides[-1].partition("=")[0].replace(".", r"\.")
    with pytest.raises(ConfigError, match=field):
        load_config(overrides)


@pytest.mark.parametrize("takeover", ["env.takeover.on_miss=true", "env.takeover.ticks=90"])
def test_a_pick_and_place_takeover_is_allowed_to_a_policy_without_the_cube_pose(takeover):
    # the expert reads the sim's cube pose, hidden from the policy (sim/hidden_state.py)
    assert load_config([*PICK_PLACE_WITHOUT_CUBE_POSE, takeover]).env.takeover.enabled


@pytest.mark.parametrize(("old", "new"), sorted(RENAMED.items()))
def test_an_old_field_name_on_the_command_line_names_the_new_one(old, new):
    with pytest.raises(ConfigError, match=rf"{re.escape(old)}: was renamed {re.escape(new)}"):
        load_config([f"{old}=1"])


def test_an_old_field_name_in_a_preset_names_the_new_one_and_the_preset(tmp_path):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text(
        "# @package _global_\nlearner:\n  weight_ess: 0.6\nenv:\n  expert_takeover_on_miss: true\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config([f"hydra.searchpath=[file://{tmp_path}]", "experiment=mine"])
    assert "learner.weight_ess: was renamed learner.rapi.weight_ess" in str(info.value)
    assert "experiment/mine" in str(info.value)
    (tmp_path / "experiment" / "mine.yaml").write_text(
        "# @package _global_\nenv:\n  expert_takeover_on_miss: true\n"
    )
    with pytest.raises(
        ConfigError, match=r"env\.expert_takeover_on_miss: was renamed env\.takeover\.on_miss"
    ):
        load_config([f"hydra.searchpath=[file://{tmp_path}]", "experiment=mine"])


@pytest.mark.parametrize(("old", "new"), sorted(RENAMED.items()))
def test_every_rename_leads_from_a_field_that_is_gone_to_one_that_exists(old, new):
    def resolves(dotted: str) -> bool:
        node: object = RobotRLConfig()
        for part in dotted.split("."):
            if not hasattr(node, part):
                return False
            node = getattr(node, part)
        return True

    assert resolves(new) and not resolves(old)
