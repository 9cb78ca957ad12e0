"""Give freed batch buffers back to the OS in long-running processes.

glibc serves an allocation above its mmap threshold (128 KiB at start) with its own mapping
and unmaps it on free, but it raises that threshold to the size of each such block freed.
After the first transition batch (megabytes with cameras) is freed, every later batch comes
from the heap, and a burst of batches held at once stays resident after it drains: the soak
bench saw an actor's memory floor rise 60-100 MB across a learner outage and never come down,
and a learner's 74 MB once after its actors' backlogs arrived together.

An actor fixes the threshold (:func:`return_freed_buffers`): each batch gets its own mapping,
and the control loop's per-tick arrays (a 96x96 image is 27 KiB) stay below it. A learner
cannot: every large tensor of every update would then be mapped, faulted in and unmapped
again. It trims instead (:func:`trim_freed_memory`) when its ingest falls idle after a burst.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any

M_MMAP_THRESHOLD = -3
"""glibc's mallopt parameter (malloc.h); setting it also turns its dynamic adjustment off."""
THRESHOLD_BYTES = 256 * 1024


@functools.cache
def _glibc() -> Any | None:
    """The C library when it is glibc (musl and macOS need neither setting), else None."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    libc = ctypes.CDLL(name)
    if not all(hasattr(libc, f) for f in ("mallopt", "malloc_trim", "gnu_get_libc_version")):
        return None
    return libc


def return_freed_buffers(threshold_bytes: int = THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold at ``threshold_bytes``; False where the C library is not glibc."""
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(M_MMAP_THRESHOLD, threshold_bytes))


def trim_freed_memory() -> bool:
    """Hand the heap's free pages back to the OS (glibc's ``malloc_trim``, a few milliseconds);
    False where the C library is not glibc or nothing could be returned."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))
