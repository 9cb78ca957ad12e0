"""Give freed batch buffers back to the OS in a long-running actor.

glibc serves an allocation above its mmap threshold (128 KiB at start) with its own mapping
and unmaps it on free, but it raises that threshold to the size of each such block freed.
After the first transition batch (megabytes with cameras) is sent and freed, every later batch
comes from the heap, and the backlog an actor holds while the learner is away stays resident
after it drains: the soak bench saw an actor's memory floor rise 60-100 MB across a learner
outage and never come down. A fixed threshold keeps each batch its own mapping; the control
loop's per-tick arrays (a 96x96 image is 27 KiB) stay below it.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_MMAP_THRESHOLD = -3
"""glibc's mallopt parameter (malloc.h); setting it also turns its dynamic adjustment off."""
THRESHOLD_BYTES = 256 * 1024


def return_freed_buffers(threshold_bytes: int = THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold at ``threshold_bytes``; False where the C library is not
    glibc (musl, macOS), whose allocators need no such setting."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    libc = ctypes.CDLL(name)
    if not hasattr(libc, "mallopt") or not hasattr(libc, "gnu_get_libc_version"):
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, threshold_bytes))
