"""Steps of an experiment: `robotrl <role>` processes whose results are cached on disk.

A step writes its outputs into one folder and, when it succeeds, a stamp
(:class:`robotrl.core.run_folder.StepStamp`) holding its exact command line. A second run
skips a step whose stamp matches, so an interrupted or repeated experiment redoes only what
changed. Configs travel to each step as explicit Hydra overrides (every field of the
groups it reads), so a step's command line says everything it ran with.
"""

from __future__ import annotations

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

from robotrl.core.quiet import quiet_variables
from robotrl.core.run_folder import StepStamp, eval_episodes_ran, read_step_stamp, write_step_stamp


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
        """Wall seconds of each step this run executed (a failed one included)."""
        self.cached: list[str] = []
        """Steps reused from an earlier run: they took no time in this one."""

    def run(self, title: str, out_dir: Path, argv: Sequence[str], inputs: Sequence[Path] = ()) -> StepResult:
        """Run ``argv`` unless ``out_dir`` holds a matching stamp; raise :class:`StepFailedError`.

        A stamp matches when the command is the same and so is every run of the steps whose
        output folders are ``inputs``: a step whose input was rebuilt (say, a longer pretraining
        into the same folder) runs again instead of reporting numbers of the old input.
        """
        head = self.begin(title)
        key = key_of(argv, inputs)
        if is_cached(out_dir, key):
            return self.finished(head, title, out_dir, cached=True, seconds=0.0)
        self.console.print(f"{head}  ->  {out_dir}")
        start = time.perf_counter()
        code = subprocess.call(list(argv), stdin=subprocess.DEVNULL, env=step_env())
        seconds = time.perf_counter() - start
        if code != 0:
            self.seconds[title] = round(seconds, 1)
            raise StepFailedError(f"step '{title}' failed with exit code {code} (its output is above)")
        write_stamp(out_dir, key, seconds)
        return self.finished(head, title, out_dir, cached=False, seconds=seconds)

    def begin(self, title: str) -> str:
        """The numbered header of the next step (also for steps that another runner executes)."""
        self.done += 1
        return f"[bold cyan][{self.done}/{self.total}][/] {title}"

    def finished(self, head: str, title: str, out_dir: Path, cached: bool, seconds: float) -> StepResult:
        """Say how the step under ``head`` ended and keep its time (or that it was reused)."""
        if cached:
            self.console.print(f"{head}: [green]cached[/] ({out_dir})")
            self.cached.append(title)
        else:
            self.seconds[title] = round(seconds, 1)
            self.console.print(f"{head}: done in {seconds:.0f} s")
        return StepResult(cached, seconds)

    def note_cached(self, title: str, out_dir: Path) -> None:
        self.finished(self.begin(title), title, out_dir, cached=True, seconds=0.0)


def step_env() -> dict[str, str]:
    """Every step's environment: this one's, with the datasets library quiet."""
    return {**os.environ, **quiet_variables(os.environ)}


def step_key(argv: Sequence[str], inputs: dict[str, str | None]) -> dict[str, Any]:
    """What a step's stamp must match: its command without argv[0] (the interpreter, which may
    move) and the runs that made its inputs (None: an input not made, so never cached)."""
    return {"argv": list(argv[1:]), "inputs": inputs}


def key_of(argv: Sequence[str], inputs: Sequence[Path]) -> dict[str, Any]:
    """:func:`step_key` of ``argv`` reading the output folders ``inputs`` as they are now."""
    return step_key(argv, {str(p): run_id(p) for p in inputs})


def is_cached(out_dir: Path, key: dict[str, Any]) -> bool:
    """Whether ``out_dir`` holds the output of a run of ``key`` that succeeded (and made of
    inputs that all exist)."""
    stamp = read_step_stamp(out_dir)
    if stamp is None or None in key["inputs"].values():
        return False
    return bool(stamp.argv == key["argv"] and stamp.inputs == key["inputs"])


def write_stamp(out_dir: Path, key: dict[str, Any], seconds: float) -> None:
    """Mark ``out_dir`` as made by a run of ``key`` that succeeded."""
    stamp = StepStamp(
        argv=key["argv"], inputs=key["inputs"], run=f"{time.time_ns():x}", seconds=round(seconds, 1)
    )
    write_step_stamp(out_dir, stamp)


def may_continue(out_dir: Path, argv: Sequence[str], inputs: Sequence[Path], growing: str) -> bool:
    """Whether a step may resume the run left in ``out_dir`` (pretraining continues from its
    checkpoint): yes when that run was interrupted before its stamp, or made from the same inputs
    by the same command but for the override starting ``growing`` (say, more steps); no when an
    input was rebuilt or another setting changed, which a resumed run would silently ignore."""
    recorded = read_step_stamp(out_dir)
    if recorded is None:
        return True
    key = key_of(argv, inputs)

    def fixed(args: Sequence[str]) -> list[str]:
        return [a for a in args if not a.startswith(growing)]

    return recorded.inputs == key["inputs"] and fixed(recorded.argv) == fixed(key["argv"])


def run_id(out_dir: Path) -> str | None:
    """Which run of a step made the output in ``out_dir`` (None: not made)."""
    recorded = read_step_stamp(out_dir)
    return None if recorded is None else recorded.run


def ran_every_episode(out_dir: Path, episodes: int) -> bool:
    """Whether the evaluation in ``out_dir`` ran all its episodes (Ctrl-C ends one early, exit 0)."""
    return eval_episodes_ran(out_dir) == episodes


def robotrl(role: str, *overrides: str) -> list[str]:
    """The command line of a `robotrl` role with this interpreter."""
    return [sys.executable, "-m", "robotrl.cli", role, *overrides]
