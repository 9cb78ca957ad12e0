"""Composition of the actor: environment, policy, inference backend, control loop and the
optional parts (dataset recorder, rerun recording, learner pace), wired from the config.

:func:`build_loop` wires one control loop from parts the caller made (tests and benches
hand it doubles); :func:`compose_actor` makes every part of `robotrl eval` and `robotrl
actor` from the config. The serial runner (policy in this process, virtual time: unit
tests, latency experiments) and the real one (policy in a worker process, wall-clock time)
differ only in the backend :func:`make_backend` picks. Running episodes is
:mod:`robotrl.actor.run`'s; reporting them, :mod:`robotrl.actor.report`'s.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from robotrl.actor.inference import InProcessInference
from robotrl.actor.latency import DelayEstimator, seconds_to_ticks
from robotrl.actor.loop import ControlLoop, LoopSettings, early_request_pays
from robotrl.actor.pace import LearnerPace
from robotrl.actor.queue import ActionQueue
from robotrl.actor.recorder import TransitionRecorder, TransitionSink
from robotrl.actor.slots import PolicySlots, spare_of
from robotrl.actor.timing import VirtualTimeScheduler, WallClockScheduler
from robotrl.actor.worker import ProcessInference, WorkerSpec
from robotrl.config.actor import ActorConfig, Strategy
from robotrl.config.load import ConfigError
from robotrl.config.policy import PolicyConfig, PolicyKind
from robotrl.config.schema import RobotRLConfig
from robotrl.config.transport import TransportConfig
from robotrl.core.clock import MonotonicClock, VirtualClock
from robotrl.core.protocols import (
    ChunkPolicy,
    InferenceBackend,
    LatencyModel,
    LoopObserver,
    RobotEnv,
    WeightSource,
)
from robotrl.core.types import EnvSpec, Transition

if TYPE_CHECKING:
    from robotrl.actor.dataset import DatasetRecorder
    from robotrl.transport.weight_checks import Layout
    from robotrl.viz.rerun import RerunObserver

log = logging.getLogger(__name__)


def build_loop(
    env: RobotEnv,
    backend: InferenceBackend,
    cfg: ActorConfig,
    horizon: int,
    latency: LatencyModel | None,
    sink: TransitionSink | None = None,
    batch_transitions: int = 64,
    max_prefix: int = 12,
    inference_timeout_s: float = 10.0,
    observer: LoopObserver | None = None,
) -> ControlLoop:
    """A control loop in virtual time when ``cfg.virtual_time`` (``latency`` required), else wall-clock."""
    spec = env.spec
    scheduler: VirtualTimeScheduler | WallClockScheduler
    if cfg.virtual_time:
        if latency is None:
            raise ValueError("virtual time needs a latency model (actor.latency)")
        clock: VirtualClock | MonotonicClock = VirtualClock()
        rng = np.random.default_rng(cfg.seed)
        scheduler = VirtualTimeScheduler(backend, latency, rng, spec.control_hz, inference_timeout_s)
        initial = seconds_to_ticks(cfg.latency.median_s, spec.control_hz)
    else:
        clock = MonotonicClock()
        scheduler = WallClockScheduler(backend, clock, spec.control_hz, inference_timeout_s)
        initial = 1
    queue = ActionQueue(spec.action_dim, horizon, cfg.strategy, cfg.blend_decay)
    estimator = DelayEstimator(cfg.delay_window, cfg.delay_quantile, initial)
    recorder = TransitionRecorder(cfg.actor_id, sink, batch_transitions)
    settings = LoopSettings(
        strategy=cfg.strategy,
        margin_ticks=cfg.margin_ticks,
        refresh_on_new_weights=cfg.refresh_on_new_weights,
        execution_horizon=cfg.execution_horizon,
        max_prefix=max_prefix,
        max_in_flight=in_flight(cfg, horizon),
        max_inference_errors=cfg.max_inference_errors,
        seed=cfg.seed,
    )
    return ControlLoop(env, scheduler, queue, estimator, clock, recorder, settings, observer)


# -- the policy and its inference backend ----------------------------------------------------


def make_policy(policy_cfg: PolicyConfig, spec: EnvSpec) -> ChunkPolicy:
    """The configured policy: a lerobot policy folder with the env's spec for
    ``policy.kind=lerobot``, else a checkpoint from ``policy.path`` (any architecture, run with
    the config's inference settings), else a fresh one."""
    from robotrl.policy import build_policy, load_policy
    from robotrl.policy.factory import apply_inference_settings
    from robotrl.policy.inputs import spec_mismatch

    if policy_cfg.path and policy_cfg.kind is not PolicyKind.lerobot:
        policy = load_policy(policy_cfg.path, device=policy_cfg.device)
        saved_spec = getattr(policy, "spec", None)
        problems = spec_mismatch(saved_spec, spec) if isinstance(saved_spec, EnvSpec) else []
        if problems:
            raise ConfigError(
                f"policy.path={policy_cfg.path} does not fit this robot: {'; '.join(problems)}. In the"
                " sim, set env.cameras, env.image_size and env.privileged_state as in training; on an"
                " arm, name and size hardware.cameras so."
            )
        apply_inference_settings(policy, policy_cfg)
        _warn_if_not_as_configured(policy, policy_cfg)
        return policy
    return build_policy(policy_cfg, spec)


def _warn_if_not_as_configured(policy: ChunkPolicy, cfg: PolicyConfig) -> None:
    """The checkpoint decides what runs; say so when it is not the size or horizon the config
    names, since reports and tables name the config's."""
    from robotrl.policy.flow import FlowChunkPolicy

    if not isinstance(policy, FlowChunkPolicy) or cfg.kind is not PolicyKind.flow:
        return
    if (policy.cfg.size, policy.horizon) != (cfg.size, cfg.horizon):
        log.warning(
            "policy.path=%s holds a %s flow policy of horizon %d; it runs as saved, not as the "
            "config's %s of horizon %d (set policy.size and policy.horizon to match)",
            cfg.path,
            policy.cfg.size.value,
            policy.horizon,
            cfg.size.value,
            cfg.horizon,
        )


def policy_for_worker(policy: dict[str, Any], spec: dict[str, Any]) -> ChunkPolicy:
    """Worker-side factory: rebuild the config objects from JSON, then :func:`make_policy`."""
    from omegaconf import OmegaConf

    policy_cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(PolicyConfig), policy))
    assert isinstance(policy_cfg, PolicyConfig)
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in spec.items()}
    fields["camera_shapes"] = {cam: tuple(shape) for cam, shape in spec.get("camera_shapes", {}).items()}
    env_spec = EnvSpec(**fields)
    return make_policy(policy_cfg, env_spec)


def subscriber_for_worker(
    transport: dict[str, Any], actor_id: str, expected: Layout | None = None
) -> WeightSource:
    """Worker-side factory of the weight subscriber (the worker owns the policy's weights); the
    worker passes its policy's layout as ``expected``, so updates that do not fit are refused early."""
    from omegaconf import OmegaConf

    from robotrl.transport.weight_subscriber import WeightSubscriber

    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TransportConfig), transport))
    assert isinstance(cfg, TransportConfig)
    return WeightSubscriber.from_config(cfg, actor_id, expected=expected)


def loop_priority(cfg: RobotRLConfig) -> int:
    """The control loop's SCHED_FIFO priority: ``actor.realtime_priority`` in wall-clock time
    (virtual time has no deadline to keep), 0 for normal scheduling."""
    return 0 if cfg.actor.virtual_time else cfg.actor.realtime_priority


def worker_priority(loop: int) -> int:
    """The inference worker's SCHED_FIFO priority: one below the control loop's, which must
    never wait behind an inference (FIFO threads of equal priority do not preempt each other);
    normal scheduling when the loop has the lowest real-time priority or none."""
    return loop - 1 if loop > 1 else 0


def make_backend(cfg: RobotRLConfig, spec: EnvSpec, online: bool) -> tuple[InferenceBackend, int, int]:
    """The inference backend for the configured mode, the policy's horizon, and the longest
    committed prefix to give it (see :func:`max_prefix`).

    ``online``: new weights come from the learner's weight link, installed between inferences.
    """
    if cfg.actor.virtual_time:
        return _serial_backend(cfg, spec, online)
    from omegaconf import OmegaConf

    from robotrl.policy import inference_threads

    policy_json = OmegaConf.to_container(OmegaConf.structured(cfg.policy), enum_to_str=True)
    transport_json = OmegaConf.to_container(OmegaConf.structured(cfg.transport), enum_to_str=True)
    spec_json = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(spec).items()}
    worker_spec = WorkerSpec(
        f"{__name__}:{policy_for_worker.__name__}",
        {"policy": policy_json, "spec": spec_json},
        weights_factory=f"{__name__}:{subscriber_for_worker.__name__}" if online else None,
        weights_kwargs={"transport": transport_json, "actor_id": cfg.actor.actor_id} if online else {},
        weights_layout=online,
        torch_threads=inference_threads(),
        action_bounds=[list(spec.action_low), list(spec.action_high)],
        realtime_priority=worker_priority(loop_priority(cfg)),
    )
    backend = ProcessInference(worker_spec)
    trained = backend.info.max_delay
    cap = max_prefix(cfg.policy, None if trained < 0 else trained)
    return backend, backend.info.horizon, cap


def _serial_backend(cfg: RobotRLConfig, spec: EnvSpec, online: bool) -> tuple[InferenceBackend, int, int]:
    """Virtual time: the policy in this process, weights from the learner when ``online``."""
    import torch

    from robotrl.policy import inference_threads
    from robotrl.policy.factory import trained_max_delay

    torch.set_num_threads(inference_threads())
    torch.manual_seed(cfg.seed)
    active = make_policy(cfg.policy, spec)
    slots = PolicySlots(active, spare_of(active), zero_copy=True)  # updates are the subscriber's own
    weights = None
    if online:
        from robotrl.transport.weight_checks import shipped_layout
        from robotrl.transport.weight_subscriber import WeightSubscriber

        weights = WeightSubscriber.from_config(
            cfg.transport, cfg.actor.actor_id, expected=shipped_layout(active)
        )
    trained = trained_max_delay(slots.active)
    return (
        InProcessInference(slots, weights, spec.action_bounds()),
        slots.active.horizon,
        max_prefix(cfg.policy, trained),
    )


def max_prefix(policy_cfg: PolicyConfig, trained: int | None) -> int:
    """The actor commits at most this many planned actions as a new chunk's prefix: what the
    checkpoint was trained to continue when it says (prefix conditioning holds only within
    the delays seen in training), else ``policy.max_delay``."""
    if trained is None or trained == policy_cfg.max_delay:
        return policy_cfg.max_delay
    log.warning(
        "policy.max_delay=%d, but the checkpoint was trained with prefixes up to %d: using %d",
        policy_cfg.max_delay,
        trained,
        trained,
    )
    return trained


# -- every part of one actor -----------------------------------------------------------------


def make_env(cfg: RobotRLConfig) -> RobotEnv:
    """The real arm ``hardware.robot_type`` names, else the simulated task ``env.id``."""
    if cfg.hardware.robot_type is not None:
        from robotrl.hardware.factory import make_hardware_env

        arm: RobotEnv = make_hardware_env(cfg)
        return arm
    from robotrl.sim import make_env as make_sim_env

    sim: RobotEnv = make_sim_env(cfg.env)
    return sim


def tee(first: TransitionSink | None, second: TransitionSink) -> TransitionSink:
    """A sink handing every batch to ``first`` (when there is one), then to ``second``."""
    if first is None:
        return second

    def both(transitions: list[Transition]) -> None:
        first(transitions)
        second(transitions)

    return both


@dataclass
class ActorParts:
    """What :func:`compose_actor` made; :meth:`close` releases it (the loop holds the rest)."""

    env: RobotEnv
    backend: InferenceBackend
    loop: ControlLoop
    horizon: int
    pace: LearnerPace | None
    """Virtual time, online: holds episodes until the learner's version catches up."""
    dataset: DatasetRecorder | None
    """The LeRobotDataset ``actor.record_dataset`` asks for."""
    recording: RerunObserver | None
    """The rerun recording ``actor.rerun_path`` asks for (when the caller gave no observer)."""

    def close(self) -> dict[str, Any] | None:
        """Close every part; what the dataset recorder wrote (None without one)."""
        self.backend.close()
        self.env.close()
        recorded = None if self.dataset is None else self.dataset.close()
        if self.recording is not None:
            self.recording.close()
        return recorded


def compose_actor(
    cfg: RobotRLConfig, sink: TransitionSink | None, online: bool, observer: LoopObserver | None
) -> ActorParts:
    """Every part of one actor from ``cfg``: transitions go to ``sink`` (and the configured
    dataset); ``online``: weights come from the learner; ``observer`` watches every tick."""
    from robotrl.sim.latency import build_latency_model

    env = make_env(cfg)
    if not cfg.policy.path:
        log.warning("policy.path is not set: running a policy with random weights")
    backend, horizon, prefix_cap = make_backend(cfg, env.spec, online)
    latency = build_latency_model(cfg.actor.latency) if cfg.actor.virtual_time else None
    if latency is not None and cfg.actor.strategy is Strategy.prefix:
        try:
            check_prefix_covered(cfg, latency, env.spec.control_hz, horizon, prefix_cap)
        except ConfigError:
            backend.close()
            env.close()
            raise
    dataset = _dataset_recorder(cfg, env.spec)
    if dataset is not None:
        sink = tee(sink, dataset)
    recording = None
    if observer is None and cfg.actor.rerun_path:
        from robotrl.viz.rerun import RerunObserver

        observer = recording = RerunObserver(
            cfg.actor.rerun_path, application_id=f"robotrl-{cfg.actor.actor_id}"
        )
    loop = build_loop(
        env,
        backend,
        cfg.actor,
        horizon,
        latency,
        sink=sink,
        batch_transitions=cfg.transport.batch_transitions,
        max_prefix=prefix_cap,
        observer=observer,
    )
    pace = None
    if online and cfg.actor.virtual_time and cfg.actor.versions_per_episode > 0:
        assert isinstance(backend, InProcessInference)  # virtual time: the serial runner
        pace = LearnerPace(backend, cfg.actor.versions_per_episode, cfg.actor.weights_wait_s)
    return ActorParts(env, backend, loop, horizon, pace, dataset, recording)


def in_flight(cfg: ActorConfig, horizon: int) -> int:
    """Inferences the actor keeps in flight at most: ``actor.max_in_flight``, or when 0 as many
    as a delay shorter than the horizon needs in virtual time and one with a local worker."""
    return cfg.max_in_flight or (horizon if cfg.virtual_time else 1)


def check_prefix_covered(
    cfg: RobotRLConfig, latency: LatencyModel, control_hz: float, horizon: int, trained: int
) -> None:
    """Refuse a delay model under which ``prefix`` would commit more actions than the policy was
    trained to continue (``trained`` ticks, training-time RTC's ``policy.max_delay``): past it the
    prefix is cut and every switch to a new chunk has a seam. The actor commits the delay it
    expects, the ``actor.delay_quantile`` of recent delays; one inference at a time, a delay so
    long that the actor waits like sync instead (:func:`~robotrl.actor.loop.early_request_pays`)
    commits nothing."""
    from robotrl.sim.latency import expected_delay_ticks

    q = cfg.actor.delay_quantile
    ticks = expected_delay_ticks(latency, q, control_hz)
    pipelined = in_flight(cfg.actor, horizon) > 1
    if ticks <= trained or not (pipelined or early_request_pays(ticks, horizon)):
        return
    lat = cfg.actor.latency
    source = f"the checkpoint at {cfg.policy.path}" if cfg.policy.path else "policy.max_delay"
    raise ConfigError(
        f"actor.latency: {lat.kind.value}:{lat.median_s:g} makes the prefix strategy commit {ticks} ticks"
        f" (the model's {q:.0%} quantile, actor.delay_quantile), more than the {trained} the policy was"
        f" trained to continue ({source}). Pretrain with policy.max_delay >= {ticks}, or choose another"
        " actor.strategy."
    )


def _dataset_recorder(cfg: RobotRLConfig, spec: EnvSpec) -> DatasetRecorder | None:
    if not cfg.actor.record_dataset:
        return None
    from robotrl.actor.dataset import DatasetRecorder

    return DatasetRecorder(
        cfg.actor.record_dataset,
        spec,
        seed_base=cfg.actor.seed,
        block=cfg.actor.virtual_time,  # virtual time: waiting costs nothing, so nothing is dropped
        video=cfg.actor.record_video,
        overwrite=cfg.actor.record_overwrite,
    )
