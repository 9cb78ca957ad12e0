"""`robotrl check-arm`: the arm limp (torque off), read live against the safety limits.

Move each joint by hand to the ends of its range: the table shows its position, the
configured limits, and whether a command there would be clamped; for the SO-101 also
where the gripper is and whether that is inside the workspace box. Nothing is ever
commanded, so it is safe with the servos powered and the arm held by hand. Ends after
``hardware.check_seconds`` (0: at Ctrl-C) with the range each joint was seen in.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from typing import Any

import numpy as np
from rich.console import Console
from rich.live import Live
from rich.table import Table
from robotrl.hardware.factory import build_limits, make_robot, so101_kinematics
from robotrl.hardware.safety import SafetyLimits

from robotrl.config.schema import RobotRLConfig


def _table(
    names: tuple[str, ...], pos: Any, seen: Any, limits: SafetyLimits, xyz: Any, inside: bool | None
) -> Table:
    table = Table(title="arm limp: move each joint by hand to both ends (Ctrl-C ends)")
    for col in ("joint", "now", "low", "high", "seen min", "seen max", "command here"):
        table.add_column(col, justify="right")
    for j, name in enumerate(names):
        ok = limits.low[j] <= pos[j] <= limits.high[j]
        table.add_row(
            name,
            f"{pos[j]:.1f}",
            f"{limits.low[j]:.1f}",
            f"{limits.high[j]:.1f}",
            f"{seen[0][j]:.1f}",
            f"{seen[1][j]:.1f}",
            "passes" if ok else "[red]clamped[/red]",
        )
    if xyz is not None:
        where = "no box" if inside is None else ("inside the box" if inside else "[red]outside the box[/red]")
        table.caption = f"gripper at x={xyz[0]:.3f} y={xyz[1]:.3f} z={xyz[2]:.3f} m: {where}"
    return table


def main(cfg: RobotRLConfig) -> int:
    robot = make_robot(cfg.hardware)
    bus = getattr(robot, "bus", None)
    if bus is None:
        raise ValueError(f"check-arm reads one motor bus; {cfg.hardware.robot_type} has none")
    # Only the bus: lerobot's robot.connect() would switch torque on while configuring the motors.
    bus.connect()
    bus.disable_torque()  # limp: nothing below ever moves the arm
    names = tuple(robot.action_features)
    limits = build_limits(cfg.hardware, names)
    fk = so101_kinematics() if names == tuple(f"{j}.pos" for j in _so101_joints()) else None
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: stop.set())
    lo: Any = np.full(len(names), np.inf, np.float32)
    hi: Any = np.full(len(names), -np.inf, np.float32)
    outside = dict.fromkeys(names, 0)
    reads = 0
    deadline = time.monotonic() + cfg.hardware.check_seconds if cfg.hardware.check_seconds > 0 else None
    try:
        with Live(console=Console(stderr=True), refresh_per_second=10) as live:
            while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
                try:
                    raw = bus.sync_read("Present_Position")
                except ConnectionError:
                    continue
                reads += 1
                pos = np.array([raw[n.removesuffix(".pos")] for n in names], np.float32)
                lo, hi = np.minimum(lo, pos), np.maximum(hi, pos)
                for j, name in enumerate(names):
                    outside[name] += int(not limits.low[j] <= pos[j] <= limits.high[j])
                xyz = fk(pos) if fk is not None else None
                inside = None
                if xyz is not None and limits.workspace_low is not None and limits.workspace_high is not None:
                    inside = bool(
                        np.all(xyz >= limits.workspace_low) and np.all(xyz <= limits.workspace_high)
                    )
                live.update(_table(names, pos, (lo, hi), limits, xyz, inside))
                stop.wait(0.1)
    finally:
        signal.signal(signal.SIGINT, previous)
        bus.disconnect(disable_torque=True)
    seen = {n: [round(float(lo[j]), 2), round(float(hi[j]), 2)] for j, n in enumerate(names)}
    print(json.dumps({"reads": reads, "seen": seen, "outside_limits": outside}))
    return 0


def _so101_joints() -> tuple[str, ...]:
    from robotrl.sim import so101

    joints: tuple[str, ...] = so101.JOINTS
    return joints
