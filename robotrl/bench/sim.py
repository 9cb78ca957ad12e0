"""`robotrl bench sim`: SO-101 env steps per second, state only and with one and two cameras.

Runs on one core (the process is pinned, and the software rasteriser is limited to
one thread) so the number is what one actor process gets. Each configuration steps
the gymnasium env with a random walk around the start pose. The baseline, measured
in the same run, is bare MuJoCo: ``mj_step`` for the same substeps (state) plus one
``Renderer.render`` per camera. The ratio is the share of the bare speed the env
keeps after its own work (actions, clipping, observations, success checks).
"""

from __future__ import annotations

import os
import time
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


def _env_rate(task: str, cameras: tuple[str, ...], seconds: float) -> float:
    import numpy as np

    from robotrl.sim.envs import SO101Env

    env = SO101Env(task, cameras=cameras, image_size=IMAGE_SIZE, max_episode_ticks=10**9)
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = obs["state"][:6] + rng.normal(0.0, 3.0, (512, 6)).cumsum(axis=0).astype(np.float32) * 0.2
    env.step(actions[0])  # warm up (renderer, caches)
    steps, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for a in actions[:32]:
            env.step(a)
        steps += 32
        actions = np.roll(actions, -32, axis=0)
    env.close()
    return steps / elapsed


def _bare_rate(task: str, cameras: tuple[str, ...], seconds: float) -> float:
    import mujoco

    from robotrl.sim.envs import SO101Env

    env = SO101Env(task, cameras=cameras, image_size=IMAGE_SIZE)
    env.reset(seed=0)
    m, d = env.model, env.data
    renderer = None
    if cameras:
        env.render_camera(cameras[0])  # builds the renderer with the env's settings
        renderer = env._renderer
    steps, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        mujoco.mj_step(m, d, nstep=env.substeps)
        for cam in cameras:
            assert renderer is not None
            renderer.update_scene(d, camera=cam)
            renderer.render()
        steps += 1
    env.close()
    return steps / elapsed


def run(quick: bool = False) -> dict[str, Any]:
    where = pin_to_one_core()
    import robotrl.sim  # noqa: F401  (chooses the GL backend before mujoco loads)
    from robotrl.bench.report import report

    seconds = 0.5 if quick else 2.0
    rows = []
    rates: dict[str, list[float]] = {label: [] for label, _ in CONFIGS}
    for task in TASKS:
        for label, cameras in CONFIGS:
            env_rate = _env_rate(task, cameras, seconds)
            bare = _bare_rate(task, cameras, seconds)
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
