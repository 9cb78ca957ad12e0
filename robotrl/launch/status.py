"""What `robotrl launch` shows about each role: read from the files the roles already write.

The learner appends its metrics to the run folder; each actor rewrites its progress after
every episode (:mod:`robotrl.core.run_folder`). Reading files keeps the roles free of any
supervisor protocol: a role started by hand shows the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.table import Table

from robotrl.core.run_folder import ActorProgress, RoleStatus, last_learner_metrics, read_actor_progress
from robotrl.launch.supervisor import Child, State


def role_progress(run_dir: Path, role: str) -> dict[str, Any]:
    """The newest record ``role`` wrote in ``run_dir`` (empty before its first)."""
    if role == "learner":
        return last_learner_metrics(run_dir) or {}
    progress = read_actor_progress(run_dir, role)
    return {} if progress is None else progress.to_json()


def describe_progress(name: str, progress: Mapping[str, Any]) -> str:
    """One line of what ``name`` last reported (``progress``: its record, as :func:`role_progress`)."""
    if not progress:
        return "-"
    if name == "learner":
        return (
            f"group {progress.get('group', 0)}  weights v{progress.get('policy_version', 0)}  "
            f"transitions {progress.get('transitions', 0)}  "
            f"{progress.get('updates_per_s', 0.0):.1f} updates/s"
        )
    actor = ActorProgress.from_json(progress)
    return (
        f"episodes {actor.episodes}  success {actor.successes}  "
        + (f"taken over {actor.taken_over}  " if actor.taken_over else "")
        + f"executing v{actor.policy_version}  backlog {actor.backlog}"
    )


def snapshot(children: dict[str, Child], run_dir: Path, now: float) -> list[RoleStatus]:
    """One row per role: what the table shows and the launch status records."""
    return [
        RoleStatus(
            role=name,
            pid=child.pid,
            state=child.state.value,
            restarts=child.restarts,
            uptime_s=round(now - child.started_at, 1) if child.state is State.running else None,
            last_exit=child.last_exit,
            log=str(child.spec.log_path),
            progress=role_progress(run_dir, name),
        )
        for name, child in children.items()
    ]


def table(rows: list[RoleStatus], title: str) -> Table:
    out = Table(title=title)
    for column in ("role", "pid", "state", "restarts", "up", "progress"):
        out.add_column(column)
    colours = {"running": "green", "waiting": "yellow", "failed": "red", "done": "cyan", "stopped": "dim"}
    for r in rows:
        up = "-" if r.uptime_s is None else f"{r.uptime_s:.0f} s"
        out.add_row(
            r.role,
            str(r.pid or "-"),
            f"[{colours.get(r.state, 'white')}]{r.state}[/]",
            str(r.restarts),
            up,
            describe_progress(r.role, r.progress),
        )
    return out
