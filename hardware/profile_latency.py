"""`robotrl profile-latency`: time a policy's inferences on this machine into a latency profile.

Run it on the machine that will serve the policy, with the policy and camera settings
of the real run. The file it writes (JSON: ``seconds`` plus where and how they were
measured) is what :class:`robotrl.sim.latency.EmpiricalLatency` replays, so a sim
experiment (``actor.latency.kind=empirical actor.latency.profile_path=FILE``) runs
under this machine's real inference times, spikes included.

With ``hardware.robot_type`` set, the policy is built for that arm's spec (its joints and the
``hardware.cameras`` shapes, from config: no arm or camera is connected, since the GPU host has
none and the robot PC's arm should stay still) and fed frames of those shapes filled with noise:
a network's time does not depend on what the pixels show. Otherwise the sim env ``env.*`` is observed.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from robotrl.config.schema import RobotRLConfig
from robotrl.core.protocols import ChunkPolicy
from robotrl.core.types import EnvSpec, Observation

PROFILE_VERSION = 1


def measure(
    policy: ChunkPolicy, observations: list[Observation], samples: int, warmup: int, delay: int
) -> list[float]:
    """Seconds of ``samples`` inferences (after ``warmup`` untimed ones), cycling through ``observations``."""
    delay = min(delay, policy.horizon - 1)
    prefix = np.zeros((delay, policy.action_dim), np.float32) if delay else None
    seconds: list[float] = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True)) as progress:
        task = progress.add_task("warm-up", total=warmup + samples)
        for i in range(warmup + samples):
            obs = observations[i % len(observations)]
            if prefix is not None:
                prefix[:] = obs.state[: policy.action_dim]  # a committed prefix that holds the pose
            start = time.perf_counter()
            policy.infer(obs, prefix, delay)
            elapsed = time.perf_counter() - start
            if i >= warmup:
                seconds.append(elapsed)
            progress.update(task, advance=1, description="warm-up" if i < warmup else "inference")
    return seconds


def summary(seconds: list[float]) -> dict[str, float]:
    arr = np.asarray(seconds) * 1e3
    return {
        "p50_ms": round(float(np.percentile(arr, 50)), 3),
        "p90_ms": round(float(np.percentile(arr, 90)), 3),
        "p99_ms": round(float(np.percentile(arr, 99)), 3),
        "max_ms": round(float(arr.max()), 3),
        "mean_ms": round(float(arr.mean()), 3),
    }


def write_profile(path: Path, seconds: list[float], meta: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"version": PROFILE_VERSION, **meta, "summary": summary(seconds), "seconds": seconds}
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(path)


def arm_observations(spec: EnvSpec, count: int, seed: int) -> list[Observation]:
    """Observations of an arm's shapes without the arm: joints somewhere inside the action range,
    still; every camera a uint8 frame of its shape, noise."""
    rng = np.random.default_rng(seed)
    low, high = spec.action_bounds()
    observations = []
    for tick in range(count):
        joints = rng.uniform(low, high).astype(np.float32)
        state = np.concatenate([joints, np.zeros(spec.state_dim - joints.size, np.float32)])
        images = {cam: rng.integers(0, 256, shape, np.uint8) for cam, shape in spec.camera_shapes.items()}
        observations.append(Observation(tick=tick, state=state, images=images, instruction=spec.instruction))
    return observations


def observe(cfg: RobotRLConfig, count: int = 4) -> tuple[EnvSpec, list[Observation]]:
    """The spec and ``count`` observations the policy is timed on: the arm's, else the sim's."""
    if cfg.hardware.robot_type is not None:
        from robotrl.hardware.factory import hardware_spec

        spec = hardware_spec(cfg)
        return spec, arm_observations(spec, count, cfg.seed)
    from robotrl.sim import make_env

    env = make_env(cfg.env)
    try:
        observations = [env.reset(seed=cfg.seed + i) for i in range(count)]
        sim_spec: EnvSpec = env.spec
    finally:
        env.close()
    return sim_spec, observations


def main(cfg: RobotRLConfig) -> int:
    """Build the configured policy, observe the configured arm or sim env, time inferences, write
    the profile."""
    import torch

    from robotrl.actor.compose import make_policy
    from robotrl.policy import inference_threads

    torch.set_num_threads(inference_threads())
    spec, observations = observe(cfg)
    policy = make_policy(cfg.policy, spec)
    p = cfg.profile
    seconds = measure(policy, observations, p.samples, p.warmup, min(p.delay, cfg.policy.max_delay))
    meta = {
        "host": platform.node(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "device": str(getattr(policy, "device", cfg.policy.device)),
        "torch_threads": torch.get_num_threads(),
        "policy": {"kind": cfg.policy.kind.value, "size": cfg.policy.size.value, "path": cfg.policy.path},
        "env": spec.name if cfg.hardware.robot_type is not None else cfg.env.id,
        "cameras": list(spec.camera_shapes),
        "camera_shapes": {cam: list(shape) for cam, shape in spec.camera_shapes.items()},
        "image_size": cfg.env.image_size if cfg.hardware.robot_type is None else None,
        "warmup": p.warmup,
        "delay": min(p.delay, cfg.policy.max_delay),
        "time": round(time.time(), 3),
    }
    out = Path(p.output)
    write_profile(out, seconds, meta)
    stats = summary(seconds)
    table = Table(title=f"inference time of {cfg.policy.kind.value} on {meta['host']} ({p.samples} samples)")
    for name in stats:
        table.add_column(name, justify="right")
    table.add_row(*(f"{v:.2f}" for v in stats.values()))
    Console(stderr=True).print(table)
    print(
        f"profile written to {out}; replay it with actor.latency.kind=empirical "
        f"actor.latency.profile_path={out}",
        file=sys.stderr,
    )
    print(json.dumps({"profile": str(out), "samples": len(seconds), **stats}))
    return 0
