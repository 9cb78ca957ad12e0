"""The control loop's thread at SCHED_FIFO and its inference worker's one below: raised for the
block only, children left normal, a refusal named with its remedy."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import pytest

from robotrl.actor.compose import worker_priority
from robotrl.actor.realtime import RealtimeError, realtime_thread
from robotrl.actor.worker import _raise_priority
from robotrl.config.load import ConfigError

linux_only = pytest.mark.skipif(not hasattr(os, "SCHED_FIFO"), reason="SCHED_FIFO is Linux only")


def _may_use_fifo() -> bool:
    try:
        with realtime_thread(1):
            return True
    except RealtimeError:
        return False


def test_priority_zero_leaves_scheduling_alone():
    before = os.sched_getscheduler(0) if hasattr(os, "sched_getscheduler") else None
    with realtime_thread(0):
        if before is not None:
            assert os.sched_getscheduler(0) == before


@pytest.mark.parametrize("priority", [-1, 100])
def test_a_priority_outside_fifos_range_is_a_config_error(priority: int):
    with pytest.raises(ConfigError, match=r"1\.\.99"), realtime_thread(priority):
        pass


@linux_only
def test_the_block_runs_at_fifo_and_the_previous_policy_comes_back():
    if not _may_use_fifo():
        pytest.skip("this user may not use SCHED_FIFO")
    before = os.sched_getscheduler(0)
    with realtime_thread(7):
        assert os.sched_getscheduler(0) & ~os.SCHED_RESET_ON_FORK == os.SCHED_FIFO
        assert os.sched_getparam(0).sched_priority == 7
        child = subprocess.run(
            [sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"],
            capture_output=True,
            text=True,
            check=True,
        )
    assert int(child.stdout) == os.SCHED_OTHER  # an inference worker started meanwhile stays normal
    assert os.sched_getscheduler(0) == before


@linux_only
def test_a_refused_priority_names_the_setting_and_how_to_grant_it(monkeypatch: pytest.MonkeyPatch):
    def refuse(*_args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    with pytest.raises(RealtimeError) as refused, realtime_thread(50):
        pass
    message = str(refused.value)
    assert "actor.realtime_priority=50" in message
    assert "CAP_SYS_NICE" in message and "rtprio 50" in message and "actor.realtime_priority=0" in message


def test_the_inference_worker_runs_one_below_the_loop_and_normal_with_it():
    assert worker_priority(50) == 49
    assert worker_priority(1) == 1  # the lowest FIFO priority: still above every normal thread
    assert worker_priority(0) == 0


@linux_only
def test_a_worker_refused_fifo_warns_and_infers_at_normal_priority(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    def refuse(*_args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    before = os.sched_getscheduler(0)
    with contextlib.ExitStack() as stack:
        _raise_priority(stack, 49)
        assert os.sched_getscheduler(0) == before
    assert "normal priority" in caplog.text and "CAP_SYS_NICE" in caplog.text


@linux_only
def test_a_worker_holds_fifo_until_it_stops_answering():
    if not _may_use_fifo():
        pytest.skip("this user may not use SCHED_FIFO")
    before = os.sched_getscheduler(0)
    with contextlib.ExitStack() as stack:
        _raise_priority(stack, 3)
        assert os.sched_getparam(0).sched_priority == 3
    assert os.sched_getscheduler(0) == before
