"""Real-time scheduling for the control loop's thread (Linux ``SCHED_FIFO``).

Under normal scheduling a sleeping control loop wakes when the kernel gets round to it: with
a learner training on the same 2 cores, `robotrl bench actor` saw a 100 Hz loop wake 3.5-4.6 ms
late at p99 and miss 16-18 deadlines in 15 s. A ``SCHED_FIFO`` thread preempts every normal
one the moment its sleep ends (lateness p99 0.01-0.02 ms in the same bench), which is what
real-time robot stacks (ros2_control's controller manager) give their control thread.
Only the calling thread is raised, with ``SCHED_RESET_ON_FORK`` so the processes it starts
keep normal scheduling, and the previous policy comes back on exit. The inference worker
raises its own inference thread one priority below the loop's (``WorkerSpec.realtime_priority``):
the learner then cannot stretch an inference past the delay the loop planned for either.

Not raised: the other threads of the actor's process (the transition sender, the progress
display, ZeroMQ's I/O threads) and torch's extra intra-op threads. The loop shares the GIL
and a few locks with the Python ones; the bench measures the loop with none of them busy.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from robotrl.config.load import ConfigError

MAX_PRIORITY = 99
"""Linux's highest SCHED_FIFO priority."""
SETTING = "actor.realtime_priority"


class RealtimeError(ConfigError):
    """Real-time scheduling was asked for and this process may not have it (the CLI prints it
    as it prints a bad setting)."""


def _refused(priority: int, exc: OSError) -> RealtimeError:
    return RealtimeError(
        f"{SETTING}={priority}: SCHED_FIFO refused ({exc.strerror or exc}). Run as root, grant "
        f"CAP_SYS_NICE (a container: --cap-add SYS_NICE), or allow 'rtprio {priority}' for the "
        f"user in /etc/security/limits.conf (see `ulimit -r`); where the kernel groups real-time "
        f"budgets (CONFIG_RT_GROUP_SCHED), the cgroup needs one (docker: --cpu-rt-runtime). Or "
        f"set {SETTING}=0 for normal scheduling"
    )


@contextmanager
def realtime_thread(priority: int) -> Iterator[None]:
    """Run the block with the calling thread at ``SCHED_FIFO`` ``priority`` (0: unchanged).

    Raises :class:`RealtimeError`, saying how to grant the right, when the platform or the
    user's limits refuse it: an arm asked to run on time should not quietly run late.
    """
    if priority == 0:
        yield
        return
    if not 1 <= priority <= MAX_PRIORITY:
        raise RealtimeError(f"{SETTING}={priority}: a SCHED_FIFO priority is 1..{MAX_PRIORITY} (0: off)")
    if not hasattr(os, "SCHED_FIFO") or not hasattr(os, "SCHED_RESET_ON_FORK"):
        raise RealtimeError(f"{SETTING}={priority}: SCHED_FIFO is Linux only; set {SETTING}=0")
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(priority))
    except OSError as exc:
        raise _refused(priority, exc) from exc
    try:
        yield
    finally:
        # The flag stays: a user with only an rtprio limit may not clear it (EPERM), and on a
        # normal thread it changes nothing.
        os.sched_setscheduler(0, policy | os.SCHED_RESET_ON_FORK, param)


def check_realtime(priority: int) -> None:
    """Raise :class:`RealtimeError` now if :func:`realtime_thread` would refuse ``priority``:
    before a worker or a robot is started, not at the first tick."""
    with realtime_thread(priority):
        pass
