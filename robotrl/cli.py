"""`robotrl <role> [options or Hydra overrides]`: one entry point for every role.

Roles that run on the shared Hydra config get a validated
:class:`~robotrl.config.schema.RobotRLConfig`; tool-like roles (``bench``,
``keys``, ``launch``, ``vla``) parse their own flags. A role that is not built yet says so, names the
issue that tracks it, and exits non-zero; it never pretends to run.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

from omegaconf import OmegaConf

from robotrl.config.load import ConfigError, compose_config, to_config
from robotrl.config.schema import config_groups, field_docs
from robotrl.wire.auth import KeysError

EXIT_USAGE = 2
EXIT_NOT_BUILT = 3
EXIT_INTERRUPTED = 130  # the shell's code for a SIGINT


@dataclass(frozen=True)
class Role:
    name: str
    summary: str
    entry: str | None
    """'module:function' once built; None while the tracking issue is open."""
    uses_config: bool = True
    """True: the function takes a RobotRLConfig. False: it takes the raw argument list."""
    issue: int | None = None
    """The issue that builds this role, while it is not built."""


ROLES: tuple[Role, ...] = (
    Role(
        "actor",
        "run the latency-aware actor (control loop + inference worker)",
        "robotrl.actor.main:actor_role",
    ),
    Role(
        "learner",
        "run the learner: ingest transitions, RAPI or BC updates, publish weights",
        "robotrl.learner.main:run_learner",
    ),
    Role(
        "launch",
        "start a learner and N actors on this host, with health and restarts",
        "robotrl.launch.main:main",
        uses_config=False,
    ),
    Role(
        "pretrain",
        "behaviour-cloning pretraining of a chunk policy from demonstrations",
        "robotrl.policy.pretrain:main",
    ),
    Role("record", "record episodes of the scripted expert as a LeRobotDataset", "robotrl.sim.record:record"),
    Role(
        "replay",
        "replay a dataset: replay.mode=open_loop | resim | to_learner | view",
        "robotrl.replay.main:main",
    ),
    Role(
        "eval",
        "evaluate a policy: success, time to success, starved ticks, jerk",
        "robotrl.actor.main:eval_role",
    ),
    Role(
        "experiment",
        "a named experiment: experiment=demo (make demo), demo_quick, demo_pixels, vla_demo, latency_sweep",
        "robotrl.experiment.main:main",
    ),
    Role(
        "vla",
        "make a real VLA (lerobot's SmolVLA or pi0.5) offline, random weights: robotrl vla init --out DIR",
        "robotrl.policy.vla:main",
        uses_config=False,
    ),
    Role("bench", "run a benchmark: robotrl bench NAME [--quick]", "robotrl.bench:main", uses_config=False),
    Role(
        "keys", "generate CURVE key pairs: robotrl keys generate", "robotrl.wire.auth:main", uses_config=False
    ),
    Role(
        "profile-latency",
        "measure a policy's inference times into a latency profile",
        "robotrl.hardware.profile_latency:main",
    ),
    Role(
        "check-arm",
        "read the limp arm (torque off) against the safety limits as you move it by hand",
        "robotrl.hardware.check:main",
    ),
    Role("config", "print the composed, validated config for the given overrides", "robotrl.cli:show_config"),
)
ROLES_BY_NAME = {r.name: r for r in ROLES}


def usage() -> str:
    width = max(len(r.name) for r in ROLES)
    lines = [
        "usage: robotrl <role> [Hydra overrides, e.g. env=so101_pick_place actor.strategy=blend]",
        "       robotrl <role> --help    (the role and every config field)",
        "",
        "roles:",
    ]
    for r in ROLES:
        status = "" if r.entry else f"  [not built yet: issue {r.issue}]"
        lines.append(f"  {r.name.ljust(width)}  {r.summary}{status}")
    return "\n".join(lines)


def config_help() -> str:
    """Every config field with its type, default and docstring, group by group."""
    lines = ["config fields (override as group.field=value; presets as group=name):"]
    for group, cls in config_groups().items():
        docs = field_docs(cls)
        lines.append(f"  {group}:")
        default = cls()
        for f in fields(cls):
            value = getattr(default, f.name)
            if is_dataclass(value):
                sub_docs = field_docs(type(value))
                for sf in fields(value):
                    sub_value = getattr(value, sf.name)
                    shown = getattr(sub_value, "value", sub_value)
                    lines.append(f"    {f.name}.{sf.name} = {shown!r}  {sub_docs.get(sf.name, '')}")
                continue
            shown = getattr(value, "value", value)
            lines.append(f"    {f.name} = {shown!r}  {docs.get(f.name, '')}")
    return "\n".join(lines)


def show_config(cfg: Any) -> int:
    """`robotrl config`: the composed config as YAML, after validation."""
    print(OmegaConf.to_yaml(OmegaConf.structured(cfg)), end="")
    return 0


def _load_entry(entry: str) -> Callable[..., int]:
    module, _, func = entry.partition(":")
    fn: Callable[..., int] = getattr(importlib.import_module(module), func)
    return fn


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if args else EXIT_USAGE
    name, rest = args[0], args[1:]
    role = ROLES_BY_NAME.get(name)
    if role is None:
        close = difflib.get_close_matches(name, ROLES_BY_NAME, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        print(f"robotrl: unknown role {name!r}{hint}\n\n{usage()}", file=sys.stderr)
        return EXIT_USAGE

    if role.uses_config and any(a in ("-h", "--help") for a in rest):
        print(f"robotrl {role.name}: {role.summary}\n\n{config_help()}")
        return 0

    if not role.uses_config:
        if role.entry is None:
            print(f"robotrl {role.name}: not built yet (tracked by issue {role.issue})", file=sys.stderr)
            return EXIT_NOT_BUILT
        return _load_entry(role.entry)(rest)

    try:
        cfg = to_config(compose_config(rest), role.name)
    except ConfigError as exc:
        print(f"robotrl {role.name}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if role.entry is None:
        print(
            f"robotrl {role.name}: config is valid, but this role is not built yet "
            f"(tracked by issue {role.issue}); nothing was run",
            file=sys.stderr,
        )
        return EXIT_NOT_BUILT
    try:
        return _load_entry(role.entry)(cfg)
    except ConfigError as exc:  # found only once the role reads its inputs (a dataset's size)
        print(f"robotrl {role.name}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeysError as exc:  # a CURVE key missing, malformed or readable by others
        print(f"robotrl {role.name}: transport.keys_dir: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        # Ctrl-C (or `robotrl launch` stopping a role) before the role installed its own
        # handler, e.g. while an actor is still starting: a clean exit, not a traceback.
        print(f"robotrl {role.name}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
