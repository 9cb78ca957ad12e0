"""Declared bounds: every one, found by walking the config, rejects a value outside it with a
message that names the field (a new field's bounds are covered without a new test)."""

from __future__ import annotations

import copy
from typing import Any, get_args, get_type_hints

import pytest

from robotrl.config.bounds import Bounds, bound_problems, declared_fields
from robotrl.config.load import ConfigError, load_config
from robotrl.config.schema import RobotRLConfig, problems


def _is_int(owner: Any, name: str) -> bool:
    hint = get_type_hints(type(owner))[name]
    return hint is int or int in get_args(hint) or list[int] in (hint, *get_args(hint))


def outside(b: Bounds, owner: Any, name: str) -> list[Any]:
    """Values that break ``b``: each edge just past the range, a choice not offered, a string
    not of the pattern, a blank, an empty or repeating list, a reversed range, an item ``each``
    refuses."""
    default = getattr(owner, name)
    listed = isinstance(default, list)
    step = 1 if _is_int(owner, name) else 0.5
    numbers = [
        *([b.ge - step] if b.ge is not None else []),
        *([b.gt] if b.gt is not None else []),
        *([b.le + step] if b.le is not None else []),
        *([b.lt] if b.lt is not None else []),
    ]
    values: list[Any] = [[n] if listed else n for n in numbers]
    if b.choices:
        values.append(["no_such_choice"] if listed else "no_such_choice")
    if b.pattern:
        values.append("not-of-the-pattern")
    if b.nonblank:
        values.append(" ")
    if b.nonempty:
        values.append([])
    if b.distinct:
        assert default, f"{name}: a distinct list needs a default item to repeat"
        values.append([default[0], default[0]])
    if b.low_high:
        values.append(list(reversed(default)))
    if b.each is not None:
        values.append(["not-an-item"] if listed else {"bad": "not-an-item"})
    return values


def cases() -> list[Any]:
    out = []
    for d in declared_fields(RobotRLConfig()):
        values = outside(d.bounds, d.owner, d.field.name)
        assert values, f"{d.name}: its declared bounds give no value to reject"
        out += [pytest.param(d.name, v, d.bounds, id=f"{d.name}={v!r}") for v in values]
    return out


def _set(cfg: RobotRLConfig, dotted: str, value: Any) -> None:
    *path, name = dotted.split(".")
    node: Any = cfg
    for part in path:
        node = getattr(node, part)
    setattr(node, name, value)


def test_the_defaults_are_inside_every_declared_bound():
    assert bound_problems(RobotRLConfig()) == []
    assert problems(RobotRLConfig()) == []


def test_the_walk_finds_the_bounds_of_nested_groups():
    names = {d.name for d in declared_fields(RobotRLConfig())}
    assert {"learner.gamma", "learner.rapi.beta", "env.takeover.ticks", "actor.latency.sigma"} <= names
    assert {"hardware.safety.watchdog_s", "dataset"} <= names
    assert len(names) > 100


@pytest.mark.parametrize(("name", "value", "bounds"), cases())
def test_every_declared_bound_rejects_a_value_outside_it_naming_the_field(name, value, bounds):
    cfg = copy.deepcopy(RobotRLConfig())
    _set(cfg, name, value)
    named = [msg for field, msg in problems(cfg) if field == name or field.startswith(f"{name}.")]
    assert named, f"{name}={value!r} passed"
    if bounds.numeric():
        assert any(bounds.range_text() in msg for msg in named), named


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("learner.gamma=2", "learner.gamma: must be in (0, 1], got 2.0"),
        (
            "learner.rapi.weight_ess=1",
            "learner.rapi.weight_ess: must be in [0, 1) (0: the fixed beta), got 1.0",
        ),
        ("learner.max_policy_lag=-1", "learner.max_policy_lag: must be >= 0 or null, got -1"),
        ("env.takeover.max_corrections=0", "env.takeover.max_corrections: must be >= 1, got 0"),
        ("transport.weights_subset=half", "transport.weights_subset: must be one of ['trainable', 'full']"),
        ("record.repo_id=x", "record.repo_id: must be of the form 'owner/name', got 'x'"),
        ("replay.episodes=[1,-1]", "replay.episodes: must hold values >= 0, got [1, -1]"),
        (
            "env.scene.cube_azimuth=[0.85,0.55]",
            "env.scene.cube_azimuth: must be a range [low, high], low <= high, each in [-1.2, 1.2], got",
        ),
        ("experiment.latencies=[warp:1]", "experiment.latencies: 'warp:1': unknown latency kind 'warp'"),
        ("+hardware.cameras.front={index_or_path:0}", "hardware.cameras.front: needs a lerobot camera"),
        ("dataset=' '", "dataset: must be null or not blank, got ' '"),
    ],
)
def test_a_bound_through_the_loader_names_the_field_and_the_bound(override, line):
    with pytest.raises(ConfigError) as info:
        load_config([override])
    assert line in str(info.value)


def test_range_text_says_which_ends_are_open():
    assert Bounds(gt=0, le=1).range_text() == "in (0, 1]"
    assert Bounds(ge=0, lt=1).range_text() == "in [0, 1)"
    assert Bounds(gt=0).range_text() == "> 0"
    assert Bounds(le=2).range_text() == "<= 2"
