"""Compose a validated :class:`RobotRLConfig` from ``configs/`` and command-line overrides.

The schema is registered in Hydra's ConfigStore here, in one place (not as a side
effect of whichever module happens to be imported). Every error, from Hydra's
override parser, OmegaConf's type checks, :func:`~robotrl.config.schema.problems`, a
renamed field (:mod:`robotrl.config.renames`) or a policy the role cannot run
(:mod:`robotrl.config.roles`), becomes one :class:`ConfigError` that names the field.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from hydra import compose, initialize_config_module
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from robotrl.config.renames import renamed_message, renamed_overrides
from robotrl.config.roles import role_problems
from robotrl.config.schema import RobotRLConfig, config_groups, problems

CONFIG_MODULE = "robotrl.configs"
PRIMARY = "config"


class ConfigError(ValueError):
    """A config that cannot be used; the message names every bad field."""


def register_configs() -> None:
    """Register the root schema and one ``<group>_schema`` per group in the ConfigStore."""
    store = ConfigStore.instance()
    store.store(name="robotrl_schema", node=RobotRLConfig)
    for group, cls in config_groups().items():
        store.store(group=group, name=f"{group}_schema", node=cls)


def _field_of(exc: BaseException) -> str | None:
    """The dotted key OmegaConf attached to an error anywhere in its cause chain."""
    seen: BaseException | None = exc
    while seen is not None:
        key = getattr(seen, "full_key", None)
        if key:
            return str(key)
        seen = seen.__cause__ or seen.__context__
    return None


def _message_of(exc: BaseException) -> str:
    seen: BaseException | None = exc
    while seen is not None:
        if getattr(seen, "full_key", None):
            return str(getattr(seen, "msg", None) or seen).splitlines()[0]
        seen = seen.__cause__ or seen.__context__
    root = exc.__cause__ or exc
    text = str(root).split("\nConfig search path")[0]
    # Schemas are registered as options of each group; they are not presets a user picks.
    kept = [line for line in text.splitlines() if not line.strip().endswith("_schema")]
    return "\n".join(kept).strip()


def compose_config(overrides: Sequence[str] = ()) -> DictConfig:
    """The composed (not yet validated) config; raises :class:`ConfigError` on bad overrides."""
    renamed = renamed_overrides(overrides)
    if renamed:
        raise problems_error(renamed)
    register_configs()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
            return compose(config_name=PRIMARY, overrides=list(overrides))
    except Exception as exc:  # Hydra and OmegaConf raise several types; all are config errors
        field_name = _field_of(exc)
        where = f"{field_name}: " if field_name else ""
        moved = renamed_message(field_name) if field_name else None
        if moved:
            preset = re.match(r"In '([^']+)'", str(exc))
            moved += f" (in the preset {preset[1]})" if preset else ""
        raise ConfigError(f"bad config: {where}{moved or _message_of(exc)}") from exc
    finally:
        GlobalHydra.instance().clear()


def to_config(composed: DictConfig, role: str | None = None) -> RobotRLConfig:
    """A typed, validated :class:`RobotRLConfig` from a composed config; with ``role`` (a
    `robotrl` role's name) also checked against the policy kinds that role can run."""
    try:
        cfg: Any = OmegaConf.to_object(composed)
    except Exception as exc:
        field_name = _field_of(exc)
        where = f"{field_name}: " if field_name else ""
        raise ConfigError(f"bad config: {where}{_message_of(exc)}") from exc
    if not isinstance(cfg, RobotRLConfig):
        raise ConfigError(f"bad config: the root is {type(cfg).__name__}, not RobotRLConfig")
    wrong = problems(cfg) + (role_problems(role, cfg) if role else [])
    if wrong:
        raise problems_error(wrong)
    return cfg


def problems_error(wrong: list[tuple[str, str]]) -> ConfigError:
    """One :class:`ConfigError` naming every ``(field, problem)`` of ``wrong``, one per line."""
    lines = "\n".join(f"  {name}: {msg}" for name, msg in wrong)
    return ConfigError(f"bad config:\n{lines}")


def load_config(overrides: Sequence[str] = (), role: str | None = None) -> RobotRLConfig:
    """Compose ``configs/config.yaml`` with ``overrides`` and validate it (for ``role``, if given)."""
    return to_config(compose_config(overrides), role)
