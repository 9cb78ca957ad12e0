"""The environment that keeps the datasets library quiet in robotrl's child processes.

Its per-episode progress bars would drown robotrl's own output, so the variable that turns
them off is set. lerobot's ``SuppressProgressBars`` turns them back on as it exits, and
datasets then warns, once per call, that the variable has priority: that warning is
filtered, and only that one.
"""

from __future__ import annotations

from collections.abc import Mapping

_NO_BARS = {"HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
_NO_BARS_WARNING = "ignore:Cannot enable progress bars:UserWarning"


def quiet_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables to set over ``environ`` for a quiet child: the datasets library's bars off
    and its warning about that filtered. Filters already in ``environ``'s ``PYTHONWARNINGS`` are
    kept; ours comes last, so it wins for that one message (a later filter takes precedence),
    and is added once however deep the children nest."""
    filters = [w for w in environ.get("PYTHONWARNINGS", "").split(",") if w]
    if _NO_BARS_WARNING not in filters:
        filters.append(_NO_BARS_WARNING)
    return {**_NO_BARS, "PYTHONWARNINGS": ",".join(filters)}
