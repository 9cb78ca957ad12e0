"""Steps of an experiment: `robotrl <role>` processes whose results are cached on disk.

A step writes its outputs into one folder and, when it succeeds, a stamp
(``.robotrl_step.json``) holding its exact command line. A second run skips a step
whose stamp matches, so an interrupted or repeated experiment redoes only what
changed. Configs travel to each step as explicit Hydra overrides (every field of the
groups it reads), so a step's command line says everything it ran with.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from rich.console import Console

STAMP = ".robotrl_step.json"
QUIET = {"HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
"""Environment of every step: the datasets library's per-episode bars would drown robotrl's own."""


class StepFailedError(RuntimeError):
    """A step's process exited non-zero; the message says which and where its output is."""


def hydra_value(value: Any) -> str:
    """One value in Hydra's override grammar (strings quoted, so paths and ids stay strings)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return hydra_value(value.value)
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


def overrides_of(obj: Any, prefix: str) -> list[str]:
    """Every leaf field of a config dataclass as ``prefix.field=value``."""
    out: list[str] = []
    for f in fields(obj):
        value = getattr(obj, f.name)
        key = f"{prefix}.{f.name}"
        if is_dataclass(value):
            out += overrides_of(value, key)
        else:
            out.append(f"{key}={hydra_value(value)}")
    return out


def config_overrides(cfg: Any, groups: Iterable[str]) -> list[str]:
    """Overrides that reproduce ``cfg``'s values for ``groups`` in another process."""
    out: list[str] = []
    for group in groups:
        out += overrides_of(getattr(cfg, group), group)
    return out


@dataclass
class StepResult:
    cached: bool
    seconds: float


class Steps:
    """Runs numbered steps with a header each; the child's own progress shows beneath it."""

    def __init__(self, total: int, console: Console) -> None:
        self.total = total
        self.done = 0
        self.console = console
        self.seconds: dict[str, float] = {}

    def run(self, title: str, out_dir: Path, argv: Sequence[str]) -> StepResult:
        """Run ``argv`` unless ``out_dir`` holds a matching stamp; raise :class:`StepFailedError`."""
        self.done += 1
        head = f"[bold cyan][{self.done}/{self.total}][/] {title}"
        stamp = out_dir / STAMP
        if _stamp_matches(stamp, argv):
            self.console.print(f"{head}: [green]cached[/] ({out_dir})")
            self.seconds[title] = 0.0
            return StepResult(True, 0.0)
        self.console.print(f"{head}  ->  {out_dir}")
        start = time.perf_counter()
        code = subprocess.call(list(argv), stdin=subprocess.DEVNULL, env={**os.environ, **QUIET})
        seconds = time.perf_counter() - start
        self.seconds[title] = round(seconds, 1)
        if code != 0:
            raise StepFailedError(f"step '{title}' failed with exit code {code} (its output is above)")
        out_dir.mkdir(parents=True, exist_ok=True)
        stamp.write_text(json.dumps({"argv": list(argv[1:]), "seconds": round(seconds, 1)}, indent=1))
        self.console.print(f"{head}: done in {seconds:.0f} s")
        return StepResult(False, seconds)

    def note_cached(self, title: str, out_dir: Path) -> None:
        self.done += 1
        self.console.print(f"[bold cyan][{self.done}/{self.total}][/] {title}: [green]cached[/] ({out_dir})")


def _stamp_matches(stamp: Path, argv: Sequence[str]) -> bool:
    try:
        recorded = json.loads(stamp.read_text())["argv"]
    except (OSError, ValueError, KeyError):
        return False
    return bool(recorded == list(argv[1:]))  # argv[0] is the interpreter, which may move


def robotrl(role: str, *overrides: str) -> list[str]:
    """The command line of a `robotrl` role with this interpreter."""
    return [sys.executable, "-m", "robotrl.cli", role, *overrides]
