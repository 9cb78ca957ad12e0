"""The VLA bench's measuring processes: figures come back, and a process that dies says how."""

from __future__ import annotations

import os
import signal

import pytest

from robotrl.bench.vla import MeasurerDiedError, in_child


def figures(x: int) -> dict[str, int]:
    return {"x": x}


def fails() -> dict[str, int]:
    raise ValueError("no such camera")


def killed() -> dict[str, int]:
    os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's OOM killer does
    return {}


def test_a_measuring_process_returns_its_figures():
    assert in_child(figures, 3) == {"x": 3}


def test_a_measuring_process_that_fails_or_is_killed_is_reported_not_waited_for():
    with pytest.raises(MeasurerDiedError, match="ValueError: no such camera"):
        in_child(fails)
    with pytest.raises(MeasurerDiedError, match="SIGKILL"):
        in_child(killed)
