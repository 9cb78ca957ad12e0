"""``env.scene``: the sim's physical condition. The default draws the episodes the sim always drew;
a source and a target condition differ in the simulator exactly as configured; a bad range is a
config error naming its key."""

from __future__ import annotations

import math

import numpy as np
import pytest
from robotrl.sim.envs import SO101Env
from robotrl.sim.registry import so101_env

from robotrl.cli import main
from robotrl.config.load import ConfigError, load_config
from robotrl.config.scene import SceneConfig

PICK_PLACE = ["env=so101_pick_place", "env.cameras=[]"]
TARGET = {
    "cube_azimuth": [0.55, 0.85],
    "cube_radius": [0.20, 0.24],
    "cube_mass_scale": 4.0,
    "cube_friction_scale": 0.25,
}
"""A target condition: the cube left of the demonstrated range, heavier and more slippery."""

BEFORE_THE_SCENE = {
    0: (
        [
            0.19228883317865414,
            -0.08161453173535085,
            0.0125,
            0.9889147239978948,
            0.0,
            0.0,
            -0.14848457381212168,
        ],
        [0.24203676504542265, 0.007366286941584815, 0.001],
        0.031415983557273146,
        1.2745699658997385,
    ),
    1: (
        [0.22887563949196904, -0.1269583175777763, 0.0125, 0.941504258357814, 0.0, 0.0, -0.3370010853010753],
        [0.22259364966214118, -0.01087051853714525, 0.001],
        0.06751823363150262,
        1.368245254791624,
    ),
    7: (
        [
            0.16733703235242536,
            -0.09963162810410439,
            0.0125,
            0.9724810513574815,
            0.0,
            0.0,
            -0.23298198374691398,
        ],
        [0.18423789968882712, 0.0432233162060906, 0.001],
        0.040765434911779946,
        1.2961272203147067,
    ),
}
"""Seed -> (cube pose, zone position, cube mass, cube sliding friction) after reset, as the sim
drew them with its hard-coded ranges before ``env.scene`` existed (commit aa3dd89)."""


def _overrides(scene: dict[str, object]) -> list[str]:
    return [f"env.scene.{k}={v}".replace(" ", "") for k, v in scene.items()]


def _cube(env: SO101Env) -> tuple[float, float, float, float]:
    """The cube's (azimuth, radius, mass, sliding friction) now."""
    x, y = env.cube_pose[:2]
    m = env.model
    mass = float(m.body_mass[m.body("cube").id])
    return math.atan2(y, x), math.hypot(x, y), mass, float(m.geom_friction[m.geom("cube").id, 0])


@pytest.mark.parametrize("seed", sorted(BEFORE_THE_SCENE))
def test_the_default_scene_draws_the_episodes_the_sim_drew_before_it(seed):
    cube, zone, mass, friction = BEFORE_THE_SCENE[seed]
    configured = so101_env(load_config(PICK_PLACE).env, privileged_state=True)
    plain = SO101Env("pick_place", privileged_state=True)
    first = {}
    for name, env in (("configured", configured), ("plain", plain)):
        first[name], _ = env.reset(seed=seed)
        np.testing.assert_allclose(env.cube_pose, cube, rtol=0, atol=1e-15)
        np.testing.assert_allclose(env.goal_pos, zone, rtol=0, atol=1e-15)
        assert _cube(env)[2:] == pytest.approx((mass, friction), rel=1e-15)
    np.testing.assert_array_equal(first["configured"]["state"], first["plain"]["state"])


def test_source_and_target_differ_in_the_simulator_exactly_as_configured():
    source = so101_env(load_config(PICK_PLACE).env, privileged_state=True)
    target = so101_env(load_config([*PICK_PLACE, *_overrides(TARGET)]).env, privileged_state=True)
    assert target.scene == SceneConfig(**TARGET)  # type: ignore[arg-type]
    ratio = {"mass": [], "friction": []}
    for seed in range(40):
        source.reset(seed=seed)
        target.reset(seed=seed)
        src, tgt = _cube(source), _cube(target)
        assert -0.55 <= src[0] <= 0.55 and 0.17 <= src[1] <= 0.27
        assert 0.55 <= tgt[0] <= 0.85 and 0.20 <= tgt[1] <= 0.24
        ratio["mass"].append(tgt[2] / src[2])  # the same seed draws the same random factor
        ratio["friction"].append(tgt[3] / src[3])
    np.testing.assert_allclose(ratio["mass"], 4.0, rtol=1e-12)
    np.testing.assert_allclose(ratio["friction"], 0.25, rtol=1e-12)


def test_without_randomisation_the_cube_is_the_nominal_model_times_the_scales():
    nominal = SO101Env("pick_place", domain_randomization=False)
    scaled = SO101Env("pick_place", domain_randomization=False, scene=SceneConfig(**TARGET))  # type: ignore[arg-type]
    nominal.reset(seed=3)
    scaled.reset(seed=3)
    cube, geom = nominal.model.body("cube").id, nominal.model.geom("cube").id
    n, s = nominal.model, scaled.model
    assert s.body_mass[cube] == pytest.approx(4.0 * n.body_mass[cube], rel=1e-15)
    np.testing.assert_allclose(s.body_inertia[cube], 4.0 * n.body_inertia[cube], rtol=1e-15)
    assert s.geom_friction[geom, 0] == pytest.approx(0.25 * n.geom_friction[geom, 0], rel=1e-15)
    np.testing.assert_array_equal(s.geom_friction[geom, 1:], n.geom_friction[geom, 1:])
    scaled.reset(seed=4)  # scaled from the nominal again, not compounded over resets
    assert s.body_mass[cube] == pytest.approx(4.0 * n.body_mass[cube], rel=1e-15)


def test_mass_and_friction_scales_change_no_other_draw_of_the_episode():
    plain = SO101Env("pick_place", privileged_state=True)
    heavy = SO101Env(
        "pick_place", privileged_state=True, scene=SceneConfig(cube_mass_scale=3, cube_friction_scale=0.5)
    )
    for seed in (0, 5):
        a, _ = plain.reset(seed=seed)
        b, _ = heavy.reset(seed=seed)
        np.testing.assert_array_equal(a["state"], b["state"])


@pytest.mark.parametrize("task", ["reach", "track", "avoid"])
def test_tasks_without_a_cube_ignore_the_scene(task):
    plain, shifted = SO101Env(task), SO101Env(task, scene=SceneConfig(**TARGET))  # type: ignore[arg-type]
    a, _ = plain.reset(seed=2)
    b, _ = shifted.reset(seed=2)
    np.testing.assert_array_equal(a["state"], b["state"])
    np.testing.assert_array_equal(plain.model.body_mass, shifted.model.body_mass)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("env.scene.cube_azimuth=[0.85,0.55]", "env.scene.cube_azimuth"),
        ("env.scene.cube_azimuth=[0.55]", "env.scene.cube_azimuth"),
        ("env.scene.cube_azimuth=[0.1,0.2,0.3]", "env.scene.cube_azimuth"),
        ("env.scene.cube_azimuth=[0.5,1.5]", "env.scene.cube_azimuth"),
        ("env.scene.cube_radius=[0.27,0.17]", "env.scene.cube_radius"),
        ("env.scene.cube_radius=[0.05,0.2]", "env.scene.cube_radius"),
        ("env.scene.cube_mass_scale=0", "env.scene.cube_mass_scale"),
        ("env.scene.cube_friction_scale=-1", "env.scene.cube_friction_scale"),
    ],
)
def test_a_bad_scene_is_a_config_error_naming_its_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config([*PICK_PLACE, override])


def test_the_cli_exits_2_on_a_reversed_range(tmp_path, capsys):
    argv = ["record", "policy=expert", *PICK_PLACE, f"record.output_dir={tmp_path / 'demos'}"]
    assert main([*argv, "env.scene.cube_azimuth=[0.85,0.55]"]) == 2
    assert "env.scene.cube_azimuth" in capsys.readouterr().err
    assert not (tmp_path / "demos").exists()


def test_an_env_built_directly_refuses_a_bad_scene():
    with pytest.raises(ValueError, match=r"env\.scene\.cube_radius"):
        SO101Env("pick_place", scene=SceneConfig(cube_radius=[0.3, 0.2]))
