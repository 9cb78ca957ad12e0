"""`robotrl bench sim`: SO-101 env steps per second, state only and with one and two cameras.

Runs on one core (the process is pinned, and the software rasteriser is limited to
one thread) so the number is what one actor process gets. Each configuration steps
the gymnasium env with a random walk around the start pose. The baseline, measured
in the same run and interleaved with it, is bare MuJoCo: ``mj_step`` for the same substeps (state) plus one
``Renderer.render`` per camera. The ratio is the share of the bare speed the env
keeps after its own work (actions, clipping, observations, success checks).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

IMAGE_SIZE = 96
CONFIGS = (("state", ()), ("1cam", ("front",)), ("2cam", ("front", "wrist")))
TASKS = ("reach", "pick_place")


def pin_to_one_core() -> str:
    """Pin this process to one CPU and limit the software rasteriser to one thread."""
    os.environ["LP_NUM_THREADS"] = "1"  # Mesa llvmpipe (OSMesa/EGL), read when a GL context starts
    if hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        return f"cpu {cpu}"
    return "unpinned"


def measure(
    task: str, cameras: tuple[str, ...], seconds: float, rounds: int, image_size: int = IMAGE_SIZE
) -> tuple[float, float]:
    """(env steps/s, bare MuJoCo steps/s), medians of interleaved rounds on one env."""
    import mujoco
    import numpy as np

    from robotrl.sim.envs import SO101Env
    from robotrl.sim.render import make_renderer

    env = SO101Env(task, cameras=cameras, image_size=image_size, max_episode_ticks=10**9)
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    walk = rng.normal(0.0, 0.6, (4096, 6)).cumsum(axis=0)
    actions = (obs["state"][:6] + walk - walk.mean(axis=0)).astype(np.float32)
    env.step(actions[0])  # warm up
    renderer = make_renderer(env.model, image_size) if cameras else None

    def env_loop(i: int) -> None:
        env.step(actions[i % len(actions)])

    def bare_loop(i: int) -> None:
        mujoco.mj_step(env.model, env.data, nstep=env.substeps)
        for cam in cameras:
            assert renderer is not None
            renderer.update_scene(env.data, camera=cam)
            renderer.render()

    env_rates, bare_rates = [], []
    for _ in range(rounds):
        env_rates.append(_rate(env_loop, seconds / rounds))
        bare_rates.append(_rate(bare_loop, seconds / rounds))
    env.close()
    if renderer is not None:
        renderer.close()
    return statistics.median(env_rates), statistics.median(bare_rates)


def _rate(step: Callable[[int], None], seconds: float) -> float:
    steps, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(16):
            step(steps)
            steps += 1
    return steps / elapsed


def run(quick: bool = False) -> dict[str, Any]:
    where = pin_to_one_core()
    import robotrl.sim  # noqa: F401  (chooses the GL backend before mujoco loads)
    from robotrl.bench.report import report

    seconds, rounds = (0.6, 3) if quick else (3.0, 5)
    rows = []
    rates: dict[str, list[float]] = {label: [] for label, _ in CONFIGS}
    for task in TASKS:
        for label, cameras in CONFIGS:
            env_rate, bare = measure(task, cameras, seconds, rounds)
            rates[label].append(env_rate)
            rows.append([task, label, env_rate, bare, f"{env_rate / bare:.2f}"])
    result: dict[str, Any] = {"bench": "sim"}
    for label, values in rates.items():
        result[f"steps_per_s_{label}"] = round(min(values), 1)  # the slower task
    result["gl_backend"] = os.environ.get("MUJOCO_GL", "default")
    result["image_size"] = IMAGE_SIZE
    report(
        f"sim: SO-101 env steps/s on one core ({where}, MUJOCO_GL={result['gl_backend']}, "
        f"{IMAGE_SIZE}x{IMAGE_SIZE} cameras, {'quick' if quick else 'full'} run)",
        ["task", "observation", "env steps/s", "bare MuJoCo steps/s", "ratio vs bare"],
        rows,
        result,
    )
    return result
