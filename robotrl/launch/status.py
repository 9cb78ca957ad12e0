"""What `robotrl launch` shows about each role: read from the files the roles already write.

The learner appends JSON lines to ``learner_metrics.jsonl``; each actor rewrites
``actor_<id>_progress.json`` after every episode. Reading files keeps the roles free of
any supervisor protocol: a role started by hand shows the same.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rich.table import Table

from robotrl.launch.supervisor import Child, State

LEARNER_METRICS = "learner_metrics.jsonl"


def last_json_line(path: Path, tail_bytes: int = 16_384) -> dict[str, Any] | None:
    """The last complete JSON object of a JSON-lines file, or None."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - tail_bytes))
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line being written, or cut by the tail window
        if isinstance(record, dict):
            return record
    return None


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def learner_progress(run_dir: Path) -> dict[str, Any]:
    return last_json_line(run_dir / LEARNER_METRICS) or {}


def actor_progress(run_dir: Path, actor_id: str) -> dict[str, Any]:
    return read_json(run_dir / f"actor_{actor_id}_progress.json") or {}


def describe_progress(name: str, progress: dict[str, Any]) -> str:
    if not progress:
        return "-"
    if name == "learner":
        return (
            f"group {progress.get('group', 0)}  weights v{progress.get('version', 0)}  "
            f"transitions {progress.get('transitions', 0)}  "
            f"{progress.get('updates_per_s', 0.0):.1f} updates/s"
        )
    taken_over = progress.get("taken_over", 0)
    return (
        f"episodes {progress.get('episodes', 0)}  success {progress.get('successes', 0)}  "
        + (f"taken over {taken_over}  " if taken_over else "")
        + f"executing v{progress.get('policy_version', -1)}  backlog {progress.get('backlog', 0)}"
    )


def snapshot(children: dict[str, Child], run_dir: Path, now: float) -> list[dict[str, Any]]:
    """One row per role: what the table shows and launch_status.json records."""
    rows = []
    for name, child in children.items():
        progress = learner_progress(run_dir) if name == "learner" else actor_progress(run_dir, name)
        rows.append(
            {
                "role": name,
                "pid": child.pid,
                "state": child.state.value,
                "restarts": child.restarts,
                "uptime_s": round(now - child.started_at, 1) if child.state is State.running else None,
                "last_exit": child.last_exit,
                "log": str(child.spec.log_path),
                "progress": progress,
            }
        )
    return rows


def table(rows: list[dict[str, Any]], title: str) -> Table:
    out = Table(title=title)
    for column in ("role", "pid", "state", "restarts", "up", "progress"):
        out.add_column(column)
    colours = {"running": "green", "waiting": "yellow", "failed": "red", "done": "cyan", "stopped": "dim"}
    for r in rows:
        state = r["state"]
        up = "-" if r["uptime_s"] is None else f"{r['uptime_s']:.0f} s"
        out.add_row(
            r["role"],
            str(r["pid"] or "-"),
            f"[{colours.get(state, 'white')}]{state}[/]",
            str(r["restarts"]),
            up,
            describe_progress(r["role"], r["progress"]),
        )
    return out


def write_status(path: Path, rows: list[dict[str, Any]]) -> None:
    """launch_status.json, replaced atomically (tests and tools read it while launch runs)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"time": round(time.time(), 3), "roles": rows}, indent=1))
    tmp.replace(path)
