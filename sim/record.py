"""`robotrl record env=... policy=expert record.episodes=N`: demonstrations as a LeRobotDataset.

The scripted expert drives the sim; every tick becomes one frame in lerobot 0.6's
format (``observation.state``, ``observation.images.<camera>``, ``action``,
``next.reward``, ``next.done``, ``next.success``, ``task``), written to a local
directory, never to a hub. The expert reads the cube pose from the sim, but the
dataset's state has exactly the layout that ``env.privileged_state`` asks for. The dataset
keeps the ``env.scene`` it was recorded under (read back as
:attr:`robotrl.data.lerobot_dataset.RecordedDataset.scene`): the source condition of a policy
trained on it.

``record.expert_noise`` puts noise into the expert's command, label included (imperfect
demonstrations). ``record.dart_noise`` is DART (Laskey et al. 2017): the noise is executed
but the recorded action is the expert's clean command, so the data holds states around the
expert's path, each labelled with the command that leads back to it. ``record.miss_rate``
makes the pick-and-place expert's first grasp miss on purpose in that share of episodes: a
second expert copy, aimed ``record.miss_offset`` off the cube, is executed, while the label
until that grasp is the clean expert's; the executed copy then grasps again, so the data holds
missed grasps followed by recoveries, which clean demonstrations never show.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from robotrl.sim import so101
from robotrl.sim.envs import SO101Env
from robotrl.sim.experts import PickPlaceExpert, make_expert
from robotrl.sim.registry import so101_env
from robotrl.sim.so101 import Array

from robotrl.config.schema import RobotRLConfig
from robotrl.core import keys
from robotrl.core.types import Observation
from robotrl.data.lerobot_dataset import DatasetWriter

RECORDED_COLUMNS = ("state", "images", "instruction", "action", "reward", "terminated", "truncated")
"""What a demonstration records of each tick (robotrl.core.columns names)."""
MAX_ATTEMPTS_PER_EPISODE = 3
"""record.keep_failures=false: attempts per episode asked for before recording gives up (an
expert that cannot solve the task under this config would otherwise loop forever)."""


def record(cfg: RobotRLConfig) -> int:
    """Record ``cfg.record.episodes`` expert episodes (:mod:`robotrl.config.roles` refuses other
    policies); returns the process exit code."""
    rec = cfg.record
    root = Path(rec.output_dir)
    if root.exists():
        if not rec.overwrite:
            print(
                f"robotrl record: {root} exists; pick another record.output_dir or set record.overwrite=true",
                file=sys.stderr,
            )
            return 2
        shutil.rmtree(root)

    e = cfg.env
    env = so101_env(e, privileged_state=True)  # the experts read the cube pose
    names = (
        env.state_names if e.privileged_state else tuple(n for n in env.state_names if not keys.privileged(n))
    )
    keep = np.array([env.state_names.index(n) for n in names])
    shapes = {cam: (e.image_size, e.image_size, 3) for cam in env.cameras}
    dataset = DatasetWriter(
        root,
        rec.repo_id,
        e.control_hz,
        RECORDED_COLUMNS,
        (names, so101.ACTION_NAMES),
        shapes,
        rec.video,
        scene=asdict(e.scene),
    )
    expert = make_expert(e.id, noise=rec.expert_noise, seed=cfg.seed)
    dart = Dart(rec.dart_noise, seed=cfg.seed)
    misses = DeliberateMiss(e.id, rec.miss_rate, rec.miss_offset, rec.expert_noise, cfg.seed)
    saved = successes = attempts = 0
    columns = (TextColumn("recording"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"))
    with Progress(*columns, TimeElapsedColumn()) as progress:
        bar = progress.add_task("episodes", total=rec.episodes, info="")
        while saved < rec.episodes and attempts < MAX_ATTEMPTS_PER_EPISODE * rec.episodes:
            success = _episode(env, expert, dart, misses, dataset, keep, seed=cfg.seed + attempts)
            attempts += 1
            if success or rec.keep_failures:
                dataset.save_episode()
                saved += 1
                successes += success
            else:
                dataset.discard_episode()
            progress.update(bar, completed=saved, info=f"success {successes}/{saved}")
    dataset.finalize()
    env.close()
    frames = dataset.frames
    aimed_off = f"; {misses.missed} first grasps aimed off" if rec.miss_rate > 0 else ""
    discarded = attempts - saved
    dropped = f"; {discarded} failed attempts discarded" if discarded else ""
    counts = f"{successes} successful, {frames} frames{aimed_off}{dropped}"
    print(f"robotrl record: {saved} episodes ({counts}) in {root}")
    if saved < rec.episodes:
        print(
            f"robotrl record: the expert solved {saved} of {attempts} attempts, short of "
            f"record.episodes={rec.episodes}; recording stops after {MAX_ATTEMPTS_PER_EPISODE} attempts "
            "per episode asked for (is env.max_episode_ticks long enough for the task? "
            "record.keep_failures=true keeps the failed ones)",
            file=sys.stderr,
        )
        return 1
    return 0


class Dart:
    """Noise on the executed command only: ``std`` as a share of each joint's action range."""

    def __init__(self, std: float, seed: int) -> None:
        self.sigma = std * (so101.ACTION_HIGH - so101.ACTION_LOW)
        self.rng = np.random.default_rng([seed, 0xDA27])

    def __call__(self, label: Array) -> Array:
        if not self.sigma.any():
            return label
        noisy = label + self.rng.normal(0.0, 1.0, label.shape) * self.sigma
        return np.clip(noisy, so101.ACTION_LOW, so101.ACTION_HIGH).astype(np.float32)


class DeliberateMiss:
    """Pick-and-place: a second expert that aims its first grasp off the cube in a share of the
    episodes. Until that grasp the executed command is its own and the label the clean
    expert's; afterwards (its grasp again, or its carry) label and execution are its own."""

    def __init__(self, env_id: str, rate: float, offset_m: float, noise: float, seed: int) -> None:
        self.rate, self.offset_m = rate, offset_m
        self.rng = np.random.default_rng([seed, 0x4D155])
        self.executor: PickPlaceExpert | None = None
        if rate > 0:
            executor = make_expert(env_id, noise=noise, seed=seed)
            if not isinstance(executor, PickPlaceExpert):
                raise ValueError(f"deliberate misses need the pick-and-place task, not {env_id}")
            self.executor = executor
        self.missed = 0

    def new_episode(self) -> None:
        if self.executor is None:
            return
        self.executor.reset()
        self.executor.aim_offset = np.zeros(3)
        if self.rng.random() < self.rate:
            angle = self.rng.uniform(0.0, 2.0 * np.pi)
            distance = self.offset_m * self.rng.uniform(0.8, 1.2)
            self.executor.aim_offset = np.array([np.cos(angle), np.sin(angle), 0.0]) * distance
            self.missed += 1

    def __call__(self, observation: Observation, label: Array) -> tuple[Array, Array]:
        """(executed command, recorded action) for one tick, given the clean expert's ``label``."""
        if self.executor is None:
            return label, label
        aiming = self.executor.first_grasp_pending
        executed = self.executor.act(observation)
        return executed, (label if aiming else executed)


def _episode(
    env: SO101Env,
    expert: Any,
    dart: Dart,
    misses: DeliberateMiss,
    dataset: DatasetWriter,
    keep: Array,
    seed: int,
) -> bool:
    obs, _ = env.reset(seed=seed)
    expert.reset()
    misses.new_episode()
    instruction = env.task.instruction
    tick = 0
    while True:
        observation = Observation(tick=tick, state=obs["state"], instruction=instruction)
        executed, action = misses(observation, expert.act(observation))
        nxt, reward, terminated, truncated, info = env.step(dart(executed))
        values = {
            "state": obs["state"][keep],
            "images": {cam: obs[cam] for cam in env.cameras},
            "instruction": instruction,
            "action": action,
            "reward": reward,
            "terminated": terminated,
            "truncated": truncated,
        }
        dataset.add(values, success=bool(info["is_success"]))
        obs, tick = nxt, tick + 1
        if terminated or truncated:
            return bool(info["is_success"])
