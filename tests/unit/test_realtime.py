"""The control loop's thread at SCHED_FIFO and its inference worker's one below: raised for the
block only, children left normal, a refusal named with its remedy."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import pytest

from robotrl.actor.compose import worker_priority
from robotrl.actor.realtime import RealtimeError, check_realtime, realtime_thread
from robotrl.actor.worker import _raise_priority
from robotrl.config.load import ConfigError

linux_only = pytest.mark.skipif(not hasattr(os, "SCHED_FIFO"), reason="SCHED_FIFO is Linux only")


def _policy() -> int:
    """This thread's scheduling policy, without the reset-on-fork flag (which stays once set)."""
    return os.sched_getscheduler(0) & ~os.SCHED_RESET_ON_FORK


def _may_use_fifo() -> bool:
    try:
        with realtime_thread(1):
            return True
    except RealtimeError:
        return False


def test_priority_zero_leaves_scheduling_alone():
    before = _policy() if hasattr(os, "sched_getscheduler") else None
    with realtime_thread(0):
        if before is not None:
            assert _policy() == before


@pytest.mark.parametrize("priority", [-1, 100])
def test_a_priority_outside_fifos_range_is_a_config_error(priority: int):
    with pytest.raises(ConfigError, match=r"1\.\.99"), realtime_thread(priority):
        pass


@linux_only
def test_the_block_runs_at_fifo_and_the_previous_policy_comes_back():
    if not _may_use_fifo():
        pytest.skip("this user may not use SCHED_FIFO")
    before = _policy()
    with realtime_thread(7):
        assert _policy() == os.SCHED_FIFO
        assert os.sched_getparam(0).sched_priority == 7
        child = subprocess.run(
            [sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"],
            capture_output=True,
            text=True,
            check=True,
        )
    assert int(child.stdout) == os.SCHED_OTHER  # an inference worker started meanwhile stays normal
    assert _policy() == before


@linux_only
def test_a_refused_priority_names_the_setting_and_how_to_grant_it(monkeypatch: pytest.MonkeyPatch):
    def refuse(*_args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    with pytest.raises(RealtimeError) as refused, realtime_thread(50):
        pass
    message = str(refused.value)
    assert "actor.realtime_priority=50" in message and "Operation not permitted" in message
    assert "CAP_SYS_NICE" in message and "rtprio 50" in message and "actor.realtime_priority=0" in message


@linux_only
def test_any_refusal_of_the_kernel_is_a_config_error_before_anything_starts(monkeypatch: pytest.MonkeyPatch):
    def unsupported(*_args: object) -> None:
        raise OSError(38, "Function not implemented")  # ENOSYS: a C library without it

    monkeypatch.setattr(os, "sched_setscheduler", unsupported)
    with pytest.raises(RealtimeError, match="Function not implemented"):
        check_realtime(50)
    check_realtime(0)  # nothing asked, nothing checked


@linux_only
def test_leaving_the_block_never_clears_reset_on_fork(monkeypatch: pytest.MonkeyPatch):
    """A user granted only an rtprio limit may not clear SCHED_RESET_ON_FORK (EPERM): the policy
    restored on exit keeps it."""
    calls: list[int] = []

    def as_the_kernel_for_an_rtprio_user(_pid: int, policy: int, _param: object) -> None:
        if calls and not policy & os.SCHED_RESET_ON_FORK:
            raise PermissionError(1, "Operation not permitted")
        calls.append(policy)

    monkeypatch.setattr(os, "sched_setscheduler", as_the_kernel_for_an_rtprio_user)
    with realtime_thread(50):
        pass
    assert calls[0] == os.SCHED_FIFO | os.SCHED_RESET_ON_FORK
    assert calls[1] & os.SCHED_RESET_ON_FORK


def test_the_inference_worker_runs_one_below_the_loop_and_normal_with_it():
    assert worker_priority(50) == 49
    assert worker_priority(1) == 0  # an equal FIFO priority would never let the loop preempt it
    assert worker_priority(0) == 0


@linux_only
def test_a_worker_refused_fifo_warns_and_infers_at_normal_priority(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    def refuse(*_args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    before = _policy()
    with contextlib.ExitStack() as stack:
        _raise_priority(stack, 49)
        assert _policy() == before
    assert "normal priority" in caplog.text and "CAP_SYS_NICE" in caplog.text


@linux_only
def test_a_worker_holds_fifo_until_it_stops_answering():
    if not _may_use_fifo():
        pytest.skip("this user may not use SCHED_FIFO")
    before = _policy()
    with contextlib.ExitStack() as stack:
        _raise_priority(stack, 3)
        assert os.sched_getparam(0).sched_priority == 3
    assert _policy() == before
