"""`robotrl learner` in the background, `robotrl actor` against it: separate processes, as users run them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROBOTRL = shutil.which("robotrl") or str(Path(sys.executable).parent / "robotrl")


def shared_overrides(tmp_path: Path, max_episode_ticks: int) -> list[str]:
    """What the learner and its actor must agree on: a tiny state-only policy, episode length, the links."""
    return [
        "policy=flow_tiny",
        "env.cameras=[]",
        f"env.max_episode_ticks={max_episode_ticks}",
        f"transport.transitions_endpoint=ipc://{tmp_path}/t.sock",
        f"transport.weights_endpoint=ipc://{tmp_path}/w.sock",
        f"transport.spool_dir={tmp_path}/spool",
    ]


@dataclass
class LearnerProcess:
    """The running learner; ``output`` is filled in once it stopped."""

    process: subprocess.Popen[str]
    output: str = ""


@contextmanager
def learner_running(tmp_path: Path, shared: list[str], *overrides: str) -> Iterator[LearnerProcess]:
    """The learner (run folder tmp_path/learner) learning from the 32nd transition on, logging every group;
    terminated when the block ends, its output kept for the test's messages."""
    process = subprocess.Popen(
        [
            ROBOTRL,
            "learner",
            *shared,
            f"run_dir={tmp_path}/learner",
            "learner.rapi.critic_warmup_updates=10",
            "learner.learning_starts=32",
            "learner.batch_size=32",
            "learner.log_every_groups=1",
            *overrides,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    learner = LearnerProcess(process)
    try:
        yield learner
    finally:
        process.terminate()
        learner.output, _ = process.communicate(timeout=120)


def run_actor(tmp_path: Path, shared: list[str], *overrides: str, keys: str | None = None) -> dict[str, Any]:
    """`robotrl actor` (run folder tmp_path/actor) to its end, ``keys`` typed on its stdin; its summary.

    An actor that fails fails the test with the end of its stderr."""
    actor = subprocess.run(
        [ROBOTRL, "actor", *shared, f"run_dir={tmp_path}/actor", *overrides],
        input=keys,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert actor.returncode == 0, actor.stderr[-3000:]
    summary: dict[str, Any] = json.loads((tmp_path / "actor" / "actor_actor-0_summary.json").read_text())
    return summary
