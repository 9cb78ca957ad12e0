"""Learner metrics: a console line, a JSON object per line in a file, a rerun recording optionally."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console

from robotrl.core.run_folder import JsonLinesLog

CONSOLE_KEYS = (
    "group",
    "policy_version",
    "transitions",
    "q_loss",
    "v_loss",
    "policy_loss",
    "adv",
    "weight_ess",
    "lag_mean",
    "ingest_tps",
)


class MetricsLog:
    def __init__(
        self, path: str | Path | None, console: bool = True, rerun_path: str | Path | None = None
    ) -> None:
        """``rerun_path``: also record every metric as a rerun scalar series in this .rrd file."""
        self._file = None if path is None else JsonLinesLog(Path(path))
        self._console = Console(highlight=False) if console else None
        self._rr: Any = None
        if rerun_path is not None:
            import rerun as rr

            rr.init("robotrl-learner", spawn=False)
            rr.save(str(rerun_path))
            self._rr = rr

    def write(self, record: Mapping[str, float | int]) -> None:
        line = {"time": round(time.time(), 3), **record}
        if self._file is not None:
            self._file.write(line)
        if self._console is not None:
            shown = "  ".join(
                f"{k}={record[k]:.4g}" if isinstance(record[k], float) else f"{k}={record[k]}"
                for k in CONSOLE_KEYS
                if k in record
            )
            self._console.print(f"[bold]learner[/bold] {shown}")
        if self._rr is not None:
            self._rr.set_time("group", sequence=int(record.get("group", 0)))
            for key, value in record.items():
                self._rr.log(f"learner/{key}", self._rr.Scalars(float(value)))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._rr is not None:
            self._rr.disconnect()
