"""Weight updates between processes of one host, through shared memory instead of the socket.

Over loopback TCP, 200 MB of weights take about 120 ms to cross (the kernel copies them
in and out) on top of the publisher's snapshot; a learner and an actor on one machine (a
desktop with a GPU driving an arm over USB) need neither. A *segment* is a file in
``/dev/shm`` holding one version's tensors: the publisher announces it on the weight link
(a ``wshm`` message, authenticated like every other), then writes its snapshot straight into
it tensor by tensor, counting the tensors written in the file's header, and never writes it
again; a subscriber maps it read-only and checks each tensor as soon as the count covers it
(names, shapes, dtypes, every float finite, as it checks pieces), so mapping and checking
overlap the copy; then it hands out views of it: no copy, no digest (the bytes cross no
wire, and a tensor is never written again once counted).

Only files of this user, with this module's naming, are ever opened. The publisher keeps
the two newest versions' files linked (a subscriber's mapping keeps an older one's memory
alive until it lets go of the weights) and makes the next file's pages ready in the
background at the lowest priority, since writing 200 MB into fresh pages costs several
times writing into touched ones (130 ms against 18 here). Files a killed publisher left
are removed by the next one on this host.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import re
import secrets
import stat
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from robotrl.transport.background import lower_priority
from robotrl.transport.weight_checks import Layout, WeightRefused, check_tensor
from robotrl.wire.codec import ALLOWED_DTYPES, WireError

log = logging.getLogger(__name__)

SEGMENT_DIR = Path("/dev/shm")
_PREFIX = "robotrl-weights-"
_NAME = re.compile(_PREFIX + r"(\d+)-[0-9a-f]{16}")
_ALIGN = 64
_HEADER = _ALIGN
"""The header: tensors written so far, then the state (:data:`_WRITING`, ...), two uint64."""
_WRITING, _DONE, _ABANDONED = 0, 1, 2
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")

Entry = tuple[str, str, tuple[int, ...], int]
"""One tensor of a segment: name, wire dtype name, shape, byte offset."""


def host_id() -> str | None:
    """This boot's id where segments can be made and read (equal for two processes of one
    host), else None (no ``/dev/shm``, not Linux)."""
    try:
        boot = _BOOT_ID.read_text().strip()
    except OSError:
        return None
    usable = SEGMENT_DIR.is_dir() and os.access(SEGMENT_DIR, os.W_OK | os.X_OK)
    return boot if usable and 0 < len(boot) <= 64 else None


def _plan(tensors: Mapping[str, npt.NDArray[Any]]) -> tuple[list[Entry], int]:
    """Where each tensor goes (name order, 64-byte aligned) and the segment's size."""
    entries, offset = [], _HEADER
    for name in sorted(tensors):
        arr = tensors[name]
        dtype = np.dtype(arr.dtype).newbyteorder("<")
        wire = next((n for n, d in ALLOWED_DTYPES.items() if d == dtype), None)
        if wire is None:
            raise ValueError(f"tensor {name!r} has dtype {arr.dtype}, which weight updates do not carry")
        entries.append((name, wire, tuple(arr.shape), offset))
        offset += -(-int(arr.nbytes) // _ALIGN) * _ALIGN
    return entries, offset


@dataclass
class Segment:
    """One version's tensors in a shared-memory file (publisher side): announce, then :meth:`fill`."""

    path: Path
    entries: list[Entry]
    arrays: dict[str, npt.NDArray[Any]]
    header: npt.NDArray[np.uint64]

    def fill(self, tensors: Mapping[str, npt.NDArray[Any]]) -> None:
        """Copy ``tensors`` in, counting each in the header once it is whole (a subscriber may be
        checking the ones before it meanwhile); the segment is never written again."""
        try:
            for index, (name, *_) in enumerate(self.entries):
                np.copyto(self.arrays[name], tensors[name], casting="equiv")
                self.header[0] = index + 1  # x86 keeps stores in order; memcpy fences its streaming ones
        except BaseException:
            self.header[1] = _ABANDONED  # a subscriber waiting on it refuses the version at once
            raise
        self.header[1] = _DONE

    def meta(self) -> dict[str, Any]:
        """What the announcement carries for a subscriber to map the file."""
        return {"segment": str(self.path), "tensors": [[n, d, list(s), o] for n, d, s, o in self.entries]}

    def unlink(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def unlink_in_background(self) -> None:
        """Unlink on a thread of the lowest priority: freeing 200 MB of pages takes tens of ms."""
        unlinking = threading.Thread(target=_at_lowest_priority, args=(self.unlink,), name="weights-shm")
        unlinking.daemon = True
        unlinking.start()


def _at_lowest_priority(work: Callable[[], object]) -> None:
    """Background work that must not take a core from a subscriber mapping a segment right now."""
    lower_priority(19)
    work()


def _view(mapped: mmap.mmap, dtype: str, shape: tuple[int, ...], offset: int) -> npt.NDArray[Any]:
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0:  # frombuffer refuses an offset at the very end
        return np.empty(shape, ALLOWED_DTYPES[dtype])
    return np.frombuffer(mapped, ALLOWED_DTYPES[dtype], count, offset).reshape(shape)


def _create(size: int) -> tuple[Path, mmap.mmap]:
    """A new segment file of ``size`` bytes (this user's only), mapped, its pages touched."""
    path = SEGMENT_DIR / f"{_PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(fd, size)
        mapped = mmap.mmap(fd, size)
    except BaseException:
        path.unlink()
        raise
    finally:
        os.close(fd)
    np.frombuffer(mapped, np.uint8)[:: mmap.PAGESIZE] = 0  # allocate every page now, not during a publish
    return path, mapped


def remove_orphans() -> int:
    """Remove segments whose publisher process is gone (killed before it could); how many."""
    removed = 0
    for path in SEGMENT_DIR.glob(_PREFIX + "*"):
        match = _NAME.fullmatch(path.name)
        if match is None:
            continue
        try:
            os.kill(int(match.group(1)), 0)
        except ProcessLookupError:
            with contextlib.suppress(OSError):
                path.unlink()
                removed += 1
        except OSError:
            continue  # alive, another user's
    return removed


class SegmentWriter:
    """Publisher side: a new segment per version, the next one's file made ready in the background."""

    def __init__(self) -> None:
        removed = remove_orphans()
        if removed:
            log.info("weights: removed %d shared-memory segment(s) left by a killed publisher", removed)
        self._lock = threading.Lock()
        self._ready: tuple[Path, mmap.mmap] | None = None
        self._preparing: threading.Thread | None = None
        self._closed = False

    def open(self, tensors: Mapping[str, npt.NDArray[Any]]) -> Segment:
        """An empty segment laid out for ``tensors`` (its :meth:`Segment.fill` copies them); the
        file of the next one is prepared meanwhile."""
        entries, size = _plan(tensors)
        if self._preparing is not None:
            self._preparing.join()  # publications closer than one preparation: wait, do not make two
        with self._lock:
            ready, self._ready = self._ready, None
        if ready is not None and len(ready[1]) != size:
            ready[0].unlink()
            ready = None
        path, mapped = ready if ready is not None else _create(size)
        header = np.frombuffer(mapped, np.uint64, 2)
        header[:] = (0, _WRITING)
        arrays = {name: _view(mapped, wire, shape, offset) for name, wire, shape, offset in entries}
        self._preparing = threading.Thread(
            target=_at_lowest_priority, args=(lambda: self._prepare(size),), name="weights-shm", daemon=True
        )
        self._preparing.start()
        return Segment(path, entries, arrays, header)

    def _prepare(self, size: int) -> None:
        try:
            made = _create(size)
        except OSError as exc:  # /dev/shm full: the next write makes its own and says why if it fails
            log.warning("weights: could not prepare a shared-memory segment: %s", exc)
            return
        with self._lock:
            if self._closed:
                made[0].unlink()
            else:
                self._ready = made

    def close(self) -> None:
        if self._preparing is not None:
            self._preparing.join()
        with self._lock:
            self._closed = True
            ready, self._ready = self._ready, None
        if ready is not None:
            ready[0].unlink()


def _entries(raw: object, max_tensors: int) -> list[Entry]:
    if not isinstance(raw, list) or not 0 < len(raw) <= max_tensors:
        raise WireError("schema", f"wshm: meta 'tensors' must list 1 to {max_tensors} tensors")
    entries: list[Entry] = []
    for item in raw:
        if not (isinstance(item, list) and len(item) == 4):
            raise WireError("schema", "wshm: a tensor is [name, dtype, shape, offset]")
        name, dtype, shape, offset = item
        naturals = isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)
        if not (isinstance(name, str) and name and dtype in ALLOWED_DTYPES and naturals):
            raise WireError("schema", f"wshm: tensor {item!r:.80} is not [name, dtype, shape, offset]")
        if type(offset) is not int or offset < 0 or offset % _ALIGN:
            raise WireError("schema", f"wshm: tensor {name!r} has a bad offset {offset!r}")
        entries.append((name, dtype, tuple(shape), offset))
    return entries


def map_segment(
    segment: object,
    tensors: object,
    expected: Layout | None,
    max_bytes: int,
    max_tensors: int,
    *,
    wait_s: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, npt.NDArray[Any]]:
    """The announced tensors as read-only views of the segment file, each checked as a piece's
    are (:func:`check_tensor`) as soon as the publisher has written it (``wait_s`` at most for
    all of them). Raises WireError for a malformed announcement, WeightRefused for tensors that
    must not be installed or were never all written, OSError when the file cannot be read here."""
    if (
        not isinstance(segment, str)
        or Path(segment).parent != SEGMENT_DIR
        or not _NAME.fullmatch(Path(segment).name)
    ):
        raise WireError("schema", f"wshm: {segment!r:.120} is not a weight segment")
    entries = _entries(tensors, max_tensors)
    fd = os.open(segment, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise PermissionError(f"{segment} is not a regular file of this user")
        most = _HEADER + max_bytes + _ALIGN * len(entries)  # the tensors' bytes, each padded
        if not _HEADER < info.st_size <= most:
            raise WeightRefused("oversized", f"segment of {info.st_size} bytes (at most {most})")
        mapped = mmap.mmap(fd, info.st_size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    views: list[tuple[str, npt.NDArray[Any]]] = []
    end = _HEADER
    for name, dtype, shape, offset in entries:  # in the order written: one after the other
        nbytes = int(np.prod(shape, dtype=np.int64)) * ALLOWED_DTYPES[dtype].itemsize
        if offset < end or offset + nbytes > info.st_size:
            raise WireError("schema", f"wshm: tensor {name!r} is out of order, overlaps or runs past the end")
        end = offset + nbytes
        views.append((name, _view(mapped, dtype, shape, offset)))
    if len({name for name, _ in views}) != len(views):
        raise WeightRefused("names", "a tensor announced twice")
    header = np.frombuffer(mapped, np.uint64, 2)
    deadline = clock() + wait_s
    for index, (name, view) in enumerate(views):
        while header[0] <= index:
            if header[1] == _ABANDONED or clock() > deadline:
                raise WeightRefused("partial", f"segment {segment}: tensor {name!r} was never written")
            time.sleep(0.0002)
        check_tensor(name, view, expected)
    return dict(views)
