"""Progress lines of `robotrl launch` runs that write their output to logs (run side by side).

A launch run in the foreground shows its own status table; runs in the background only
write it to their launch status file (:mod:`robotrl.core.run_folder`). :class:`LaunchProgress`
reads those files every ``interval_s`` and prints one line per run, so a user watching
fifteen minutes of parallel fine-tuning sees it move.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from rich.console import Console

from robotrl.core.run_folder import RoleStatus, read_launch_status
from robotrl.launch.status import describe_progress


def _roles(run_dir: Path) -> list[RoleStatus]:
    status = read_launch_status(run_dir)
    return [] if status is None else status.roles


def progress_line(name: str, run_dir: Path) -> str | None:
    """``name: learner <progress> | actor-0 <progress>`` from ``run_dir``'s status (None: none yet)."""
    roles = [f"{r.role} {describe_progress(r.role, r.progress or {})}" for r in _roles(run_dir)]
    return f"{name}: " + " | ".join(roles) if roles else None


def launch_finished(run_dir: Path) -> bool:
    """Whether every role of the launch run in ``run_dir`` exited on its own with success: a
    run stopped by a signal exits cleanly too, with its work cut short."""
    roles = _roles(run_dir)
    return bool(roles) and all(row.state == "done" for row in roles)


class LaunchProgress:
    """A daemon thread printing :func:`progress_line` of each run in ``runs`` every ``interval_s``."""

    def __init__(self, runs: Mapping[str, Path], console: Console, interval_s: float = 30.0) -> None:
        self.runs, self.console, self.interval_s = dict(runs), console, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="robotrl-launch-progress", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            for name, run_dir in self.runs.items():
                line = None if launch_finished(run_dir) else progress_line(name, run_dir)
                if line:  # one line each in a log file too (a terminal wraps it itself)
                    self.console.print(f"  {line}", highlight=False, soft_wrap=True)

    def __enter__(self) -> LaunchProgress:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
