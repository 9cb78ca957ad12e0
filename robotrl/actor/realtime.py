"""Real-time scheduling for the control loop's thread (Linux ``SCHED_FIFO``).

Under normal scheduling a sleeping control loop wakes when the kernel gets round to it: with
a learner training on the same 2 cores, `robotrl bench actor` saw a 100 Hz loop wake 3.5-4.6 ms
late at p99 and miss 12-18 deadlines in 15 s. A ``SCHED_FIFO`` thread preempts every normal
one the moment its sleep ends (lateness p99 0.01-0.02 ms in the same bench), which is what
real-time robot stacks (ros2_control's controller manager) give their control thread.
Only the calling thread is raised, with ``SCHED_RESET_ON_FORK`` so the processes it starts
keep normal scheduling, and the previous policy comes back on exit. The inference worker
raises its own inference thread one priority below the loop's (``WorkerSpec.realtime_priority``):
the learner then cannot stretch an inference past the delay the loop planned for either.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from robotrl.config.load import ConfigError

MAX_PRIORITY = 99
"""Linux's highest SCHED_FIFO priority."""


class RealtimeError(ConfigError):
    """Real-time scheduling was asked for and this process may not have it (the CLI prints it
    as it prints a bad setting)."""


@contextmanager
def realtime_thread(priority: int, setting: str = "actor.realtime_priority") -> Iterator[None]:
    """Run the block with the calling thread at ``SCHED_FIFO`` ``priority`` (0: unchanged).

    Raises :class:`RealtimeError`, naming ``setting`` and how to grant the right, when the
    platform or the user's limits refuse it: an arm asked to run on time should not quietly
    run late.
    """
    if priority == 0:
        yield
        return
    if not 1 <= priority <= MAX_PRIORITY:
        raise RealtimeError(f"{setting}={priority}: a SCHED_FIFO priority is 1..{MAX_PRIORITY} (0: off)")
    if not hasattr(os, "SCHED_FIFO") or not hasattr(os, "SCHED_RESET_ON_FORK"):
        raise RealtimeError(f"{setting}={priority}: SCHED_FIFO is Linux only; set {setting}=0")
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(priority))
    except PermissionError as exc:
        raise RealtimeError(
            f"{setting}={priority}: this process may not use SCHED_FIFO. Run as root, grant "
            f"CAP_SYS_NICE (a container: --cap-add SYS_NICE), or allow 'rtprio {priority}' for "
            f"the user in /etc/security/limits.conf; or set {setting}=0 for normal scheduling"
        ) from exc
    try:
        yield
    finally:
        os.sched_setscheduler(0, policy, param)
