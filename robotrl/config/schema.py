"""The root of the Hydra structured config, and the rules that relate fields to each other.

The YAML files under ``configs/`` are presets over these dataclasses; Hydra checks their
types, each field's own bounds sit beside it in its group's module (checked by
:mod:`robotrl.config.bounds`), and :func:`problems` adds the rules that span fields, so a bad
value fails at start with a message that names the field.

Groups: ``env``, ``policy``, ``actor``, ``learner``, ``transport``, ``record``, ``pretrain``,
``launch``, ``experiment``, ``replay``, ``hardware``, ``profile``, each in the module of that
name (``profile`` in :mod:`robotrl.config.latency`). Every role composes the same root
:class:`RobotRLConfig` and reads the groups it needs.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from robotrl.config.actor import ActorConfig
from robotrl.config.bounds import bound_problems, bounds
from robotrl.config.env import EnvConfig
from robotrl.config.experiment import ExperimentConfig
from robotrl.config.hardware import HardwareConfig
from robotrl.config.latency import LatencyKind, ProfileConfig
from robotrl.config.launch import LaunchConfig
from robotrl.config.learner import LearnerConfig
from robotrl.config.policy import PolicyConfig, PolicyKind
from robotrl.config.pretrain import PretrainConfig
from robotrl.config.record import RecordConfig
from robotrl.config.replay import ReplayConfig
from robotrl.config.transport import TransportConfig, curve_on, is_local_endpoint

Problems = list[tuple[str, str]]
"""(dotted field, what is wrong with it) pairs."""


@dataclass
class RobotRLConfig:
    env: EnvConfig = field(default_factory=EnvConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    transport: TransportConfig = field(default_factory=TransportConfig)
    record: RecordConfig = field(default_factory=RecordConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    launch: LaunchConfig = field(default_factory=LaunchConfig)
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    dataset: str | None = field(default=None, metadata=bounds(nonblank=True))
    """Local LeRobotDataset directory of demonstrations (`robotrl pretrain dataset=...`)."""
    run_dir: str = "runs/default"
    """Where a role writes logs, checkpoints and results."""
    seed: int = 0
    """Global seed (torch, numpy) of this process."""


def problems(cfg: RobotRLConfig) -> Problems:
    """Every (dotted field, message) that is wrong with ``cfg``; empty when it is valid."""
    out = bound_problems(cfg)
    for rule in CROSS_FIELD_RULES:
        out += rule(cfg)
    return out


# -- rules that span fields (each field's own bounds sit beside it) ---------------------------


def takeover_switches(cfg: RobotRLConfig) -> Problems:
    """Takeover options that refine a trigger need that trigger."""
    t = cfg.env.takeover
    if t.miss_wait_ticks and not t.on_miss:
        return [("env.takeover.miss_wait_ticks", f"needs env.takeover.on_miss, got {t.miss_wait_ticks}")]
    if t.reopen_only and not t.corrects_grasps:
        return [("env.takeover.reopen_only", "needs env.takeover.on_miss or env.takeover.before_miss")]
    return []


def takeover_task(cfg: RobotRLConfig) -> Problems:
    """A scripted takeover needs the sim, and a grasp correction its pick-and-place (the expert
    reads the cube pose from the sim whether or not the policy may: sim/hidden_state.py)."""
    e, t = cfg.env, cfg.env.takeover
    if not t.enabled:
        return []
    switched_on = (("on_miss", t.on_miss), ("before_miss", t.before_miss), ("ticks", bool(t.ticks)))
    name = next(f"env.takeover.{name}" for name, on in switched_on if on)
    if cfg.hardware.robot_type is not None:
        return [(name, "a scripted takeover exists only in the sim (on a real arm, a person)")]
    if t.corrects_grasps and not e.pick_place:
        return [(name, f"a missed grasp exists only in pick-and-place, not {e.id}")]
    return []


def offline_learner(cfg: RobotRLConfig) -> Problems:
    """An offline learner trains a fixed budget on demonstrations: it needs both."""
    lrn = cfg.learner
    if not lrn.offline:
        return []
    if lrn.demos_path is None:
        return [("learner.offline", "needs learner.demos_path: the demonstrations it trains on")]
    if lrn.max_groups == 0:
        return [("learner.offline", "needs learner.max_groups > 0: no actor will ever stop it")]
    if lrn.max_samples_per_insert is not None:
        return [
            ("learner.max_samples_per_insert", "an offline learner inserts nothing: it would wait for ever")
        ]
    return []


def policy_settings(cfg: RobotRLConfig) -> Problems:
    """The committed prefix fits in a chunk; flow-only settings and a lerobot policy's folder."""
    p, out = cfg.policy, []
    if p.max_delay >= p.horizon:
        out.append(("policy.max_delay", f"must be in [0, horizon={p.horizon}), got {p.max_delay}"))
    if p.noise_scale != 1 and p.kind is not PolicyKind.flow:
        out.append(("policy.noise_scale", "applies to the built-in flow policy (policy.kind=flow) only"))
    if p.kind is PolicyKind.lerobot and not p.path and cfg.experiment.vla is None:  # the demo makes one
        out.append(("policy.path", "a lerobot policy needs a local directory (no hub downloads)"))
    # A lerobot policy is the other kind an experiment evaluates; the expert a preset is
    # recorded with (`robotrl record experiment=demo policy.kind=expert`) evaluates nothing.
    if cfg.experiment.eval_noise_scale is not None and p.kind is PolicyKind.lerobot:
        out.append(
            ("experiment.eval_noise_scale", "applies to the built-in flow policy (policy.kind=flow) only")
        )
    return out


def latency_model(cfg: RobotRLConfig) -> Problems:
    """Only the constant model may take no time; the empirical one needs its profile."""
    lat, out = cfg.actor.latency, []
    if lat.median_s == 0 and lat.kind is not LatencyKind.constant:
        out.append(("actor.latency.median_s", f"must be > 0 (>= 0 for constant), got {lat.median_s}"))
    if lat.kind is LatencyKind.empirical and not lat.profile_path:
        out.append(("actor.latency.profile_path", "the empirical latency model needs a profile file"))
    return out


def actor_recording(cfg: RobotRLConfig) -> Problems:
    """An actor's recording goes to a new folder unless it may replace one."""
    a = cfg.actor
    if a.record_dataset and Path(a.record_dataset).exists() and not a.record_overwrite:
        message = f"{a.record_dataset} exists; pick a new folder or set actor.record_overwrite=true"
        return [("actor.record_dataset", message)]
    return []


def buffer_capacities(cfg: RobotRLConfig) -> Problems:
    """Each replay buffer holds a few chunks at least."""
    lrn, least = cfg.learner, 4 * cfg.policy.horizon
    capacities = {"online_capacity": lrn.online_capacity, "anchor_capacity": lrn.anchor_capacity}
    return [
        (f"learner.{name}", f"must be at least 4 * policy.horizon, got {value}")
        for name, value in capacities.items()
        if value < least
    ]


def transport_links(cfg: RobotRLConfig) -> Problems:
    """Two distinct endpoints, a timeout beyond the heartbeat, keys when CURVE is on, and no
    endpoint another host can reach with CURVE off (anyone there could feed or read the links)."""
    t, out = cfg.transport, []
    if t.transitions_endpoint == t.weights_endpoint:
        out.append(("transport.weights_endpoint", "must differ from transport.transitions_endpoint"))
    if t.peer_timeout_s <= t.heartbeat_s:
        message = f"must exceed heartbeat_s={t.heartbeat_s}, got {t.peer_timeout_s}"
        out.append(("transport.peer_timeout_s", message))
    if curve_on(t) and not t.keys_dir:
        out.append(("transport.keys_dir", "curve is on, so a keys directory is needed"))
    if t.curve is False:
        exposed = [e for e in (t.transitions_endpoint, t.weights_endpoint) if not is_local_endpoint(e)]
        if exposed:
            message = (
                f"false with {', '.join(exposed)}, which other hosts can reach: anyone there could feed "
                "the learner or take its weights; set transport.curve=true (or null) and run "
                "`robotrl keys generate`, or use a loopback or ipc endpoint"
            )
            out.append(("transport.curve", message))
    return out


def recording_task(cfg: RobotRLConfig) -> Problems:
    """Deliberate misses need pick-and-place; the scripted expert needs a robotrl sim task."""
    out = []
    if cfg.record.miss_rate > 0 and not cfg.env.pick_place:
        out.append(("record.miss_rate", f"deliberate misses exist only for pick-and-place, not {cfg.env.id}"))
    if cfg.policy.kind is PolicyKind.expert and not cfg.env.id.startswith("robotrl/"):
        out.append(("env.id", f"the scripted expert exists only for robotrl/ sim tasks, got {cfg.env.id!r}"))
    return out


def launch_roles(cfg: RobotRLConfig) -> Problems:
    """A launch without the learner must start an actor."""
    if cfg.launch.actors == 0 and not cfg.launch.learner:
        return [("launch.actors", "with launch.learner=false there must be at least one actor")]
    return []


def safety_limits(cfg: RobotRLConfig) -> Problems:
    """Joint limits pair up low <= high; a workspace box has two 3-D corners, low below high."""
    s = cfg.hardware.safety
    out = []
    if len(s.joint_low) != len(s.joint_high):
        out.append(("hardware.safety.joint_high", "needs as many entries as joint_low"))
    elif any(lo > hi for lo, hi in zip(s.joint_low, s.joint_high, strict=True)):
        out.append(("hardware.safety.joint_low", "exceeds joint_high for some joint"))
    box = (s.workspace_low, s.workspace_high)
    if any(box) and not all(len(c) == 3 for c in box):
        out.append(("hardware.safety.workspace_low", "a workspace box needs two corners of 3 numbers"))
    elif all(box) and any(lo >= hi for lo, hi in zip(*box, strict=True)):
        out.append(("hardware.safety.workspace_low", "must be below workspace_high on every axis"))
    return out


CROSS_FIELD_RULES: tuple[Callable[[RobotRLConfig], Problems], ...] = (
    takeover_switches,
    takeover_task,
    offline_learner,
    policy_settings,
    latency_model,
    actor_recording,
    buffer_capacities,
    transport_links,
    recording_task,
    launch_roles,
    safety_limits,
)
"""Every rule :func:`problems` checks beside the declared bounds."""


# -- the schema as `robotrl <role> --help` shows it -----------------------------------------


def field_docs(cls: type[Any]) -> dict[str, str]:
    """Field name -> its docstring, read from the source (used by `robotrl config --help`)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, nxt in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = nxt.value.value.strip()
    return docs


def config_groups() -> dict[str, type[Any]]:
    """Group name -> dataclass, from :class:`RobotRLConfig`'s fields."""
    root = RobotRLConfig()
    return {f.name: type(getattr(root, f.name)) for f in fields(root) if is_dataclass(getattr(root, f.name))}
