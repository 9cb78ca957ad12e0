"""Weight updates between processes of one host, through shared memory instead of the socket.

Over loopback TCP, 200 MB of weights take about 120 ms to cross (the kernel copies them
in and out) on top of the publisher's snapshot; a learner and an actor on one machine (a
desktop with a GPU driving an arm over USB) need neither. A *segment* is a file in
``/dev/shm`` that holds one version's tensors at a time. The publisher announces a version
on the weight link (a ``wshm`` message, authenticated like every other), then writes its
snapshot straight into the segment tensor by tensor, counting the tensors written in the
file's header; a subscriber maps the file read-only (once: it keeps the mapping) and checks
each tensor as soon as the count covers it (names, shapes, dtypes, every float finite, as
it checks pieces), so mapping and checking overlap the copy; then it hands out views of it
as the update: no copy, no digest (the bytes cross no wire).

A subscriber's views become the actor's weights, so a segment is written again only once
nobody can read it: its version is no longer the publisher's pending or latest one, and every
subscriber told of it has since reported, in a ``want`` of the same publisher session, that
it dealt with (took or refused) that announcement (they are numbered) and that none of its
handed-out views uses the segment (:class:`SegmentLeases`, :class:`SegmentPool`). A subscriber the
publisher forgets (silent past the peer timeout) may still be using its segments: those are
retired, never written again. Reused files keep their pages: writing 200 MB into them takes
18 ms here against 130 into fresh pages.

Only files of this user, with this module's naming, are ever opened. Files a killed
publisher left are removed by the next one on this host.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import platform
import re
import secrets
import stat
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import zmq

from robotrl.transport.background import at_lowest_priority
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
MAX_HELD = 64
"""Most segments a subscriber reports holding (its weights use two or three)."""

Entry = tuple[str, str, tuple[int, ...], int]
"""One tensor of a segment: name, wire dtype name, shape, byte offset."""


def host_id() -> str | None:
    """This boot's id where segments can be made and read (equal for two processes of one
    host), else None: no ``/dev/shm``, not Linux, or not x86-64, whose in-order stores the
    header's count relies on (an ARM reader could see the count before the bytes)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        boot = _BOOT_ID.read_text().strip()
    except OSError:
        return None
    usable = SEGMENT_DIR.is_dir() and os.access(SEGMENT_DIR, os.W_OK | os.X_OK)
    return boot if usable and 0 < len(boot) <= 64 else None


def _plan(tensors: Mapping[str, npt.NDArray[Any]]) -> tuple[list[Entry], int]:
    """Where each tensor goes (name order, 64-byte aligned, after the header) and the size."""
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


def _view(mapped: mmap.mmap, dtype: str, shape: tuple[int, ...], offset: int) -> npt.NDArray[Any]:
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0:  # frombuffer refuses an offset at the very end
        return np.empty(shape, ALLOWED_DTYPES[dtype])
    return np.frombuffer(mapped, ALLOWED_DTYPES[dtype], count, offset).reshape(shape)


@dataclass(eq=False)
class Segment:
    """One shared-memory file of the publisher and the version it holds (publisher side)."""

    path: Path
    mapped: mmap.mmap
    version: int = -1
    entries: list[Entry] = field(default_factory=list)
    arrays: dict[str, npt.NDArray[Any]] = field(default_factory=dict)
    offered: bool = False
    """Its version is the publisher's pending or latest one: being announced, or still to be."""
    lessees: dict[bytes, int] = field(default_factory=dict)
    """Subscribers told of this version that may still read it or use it as weights, each with
    the number of the announcement it was last sent (it must say it dealt with that one)."""
    trackers: list[zmq.MessageTracker] = field(default_factory=list)
    """Pieces of it queued on the socket (zero-copy: they read it until sent)."""
    retired: bool = False
    """A forgotten subscriber may use it: never written again, unlinked once not offered."""

    @classmethod
    def create(cls, size: int) -> Segment:
        """A new file of ``size`` bytes (this user's only), mapped, its pages touched. Raises
        OSError (ENOSPC) when /dev/shm cannot hold it, rather than SIGBUS at the first write."""
        path = SEGMENT_DIR / f"{_PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC, 0o600)
        try:
            os.posix_fallocate(fd, 0, size)
            mapped = mmap.mmap(fd, size)
        except BaseException:
            path.unlink()
            raise
        finally:
            os.close(fd)
        np.frombuffer(mapped, np.uint8)[:: mmap.PAGESIZE] = 0  # allocate every page now
        return cls(path, mapped)

    @property
    def header(self) -> npt.NDArray[np.uint64]:
        return np.frombuffer(self.mapped, np.uint64, 2)

    def idle(self) -> bool:
        """Nobody reads it nor will be told of it: it may hold a new version."""
        self.trackers = [t for t in self.trackers if not t.done]
        return not (self.offered or self.retired or self.lessees or self.trackers)

    def lay_out(self, version: int, entries: list[Entry]) -> None:
        """Make it ``version``'s, nothing written yet."""
        self.version, self.entries, self.offered = version, entries, True
        self.arrays = {
            name: _view(self.mapped, dtype, shape, offset) for name, dtype, shape, offset in entries
        }
        self.header[:] = (0, _WRITING)

    def fill(self, tensors: Mapping[str, npt.NDArray[Any]]) -> None:
        """Copy ``tensors`` in, counting each in the header once it is whole (a subscriber may be
        checking the ones before it meanwhile)."""
        header = self.header
        try:
            for index, (name, *_) in enumerate(self.entries):
                np.copyto(self.arrays[name], tensors[name], casting="equiv")
                header[0] = index + 1  # x86 keeps stores in order; memcpy fences its streaming ones
        except BaseException:
            header[1] = _ABANDONED  # a subscriber waiting on it refuses the version at once
            raise
        header[1] = _DONE

    def meta(self) -> dict[str, Any]:
        """What the announcement carries for a subscriber to map the file."""
        return {"segment": str(self.path), "tensors": [[n, d, list(s), o] for n, d, s, o in self.entries]}

    def unlink(self) -> None:
        """Remove the file; whoever maps it keeps the memory until they let go."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


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


class SegmentPool:
    """Publisher side: its segments, each written again only once idle. Not thread-safe: the
    publisher calls it under its own lock, never waiting on a file being made: :meth:`fresh`
    makes one outside that lock, and a spare (an idle segment beside the one a publication
    takes, so that the next seldom waits for fresh pages: 130 ms for 200 MB here) is made on a
    thread of the lowest priority. Idle segments beyond the spare, or of another size, are
    unlinked."""

    SPARES = 1

    def __init__(self) -> None:
        removed = remove_orphans()
        if removed:
            log.info("weights: removed %d shared-memory segment(s) left by a killed publisher", removed)
        self._segments: list[Segment] = []
        self._lock = threading.Lock()  # guards what the maker thread shares: the three below
        self._made: list[Segment] = []  # spares made, not yet in the pool
        self._making = False
        self._closed = False
        self._background: list[threading.Thread] = []  # makers and unlinkers, joined by close

    def reuse(self, version: int, tensors: Mapping[str, npt.NDArray[Any]]) -> Segment | None:
        """An idle segment laid out for ``tensors`` as ``version`` and offered until
        :meth:`withdraw` (its :meth:`Segment.fill` copies them), or None: then :meth:`fresh`."""
        entries, size = _plan(tensors)
        with self._lock:
            if self._closed:
                return None
            self._segments += self._made
            self._made.clear()
        idle = [s for s in self._segments if s.idle()]
        fitting = [s for s in idle if len(s.mapped) == size]
        for extra in [s for s in idle if s not in fitting] + fitting[1 + self.SPARES :]:
            self._drop(extra)
        self._make_spares(size, self.SPARES - max(len(fitting) - 1, 0))
        if not fitting:
            return None
        fitting[0].lay_out(version, entries)
        return fitting[0]

    @staticmethod
    def fresh(tensors: Mapping[str, npt.NDArray[Any]]) -> Segment | None:
        """A new segment for ``tensors`` (made without any lock: 130 ms for 200 MB), to
        :meth:`adopt`; None when /dev/shm cannot hold it (the version goes over the socket)."""
        size = _plan(tensors)[1]
        try:
            return Segment.create(size)
        except OSError as exc:
            log.warning("weights: no shared-memory segment of %d MB (%s); over the socket", size >> 20, exc)
            return None

    def adopt(
        self, segment: Segment, version: int, tensors: Mapping[str, npt.NDArray[Any]]
    ) -> Segment | None:
        """``segment`` (from :meth:`fresh`) in the pool, laid out as :meth:`reuse` lays one out."""
        with self._lock:
            closed = self._closed
        if closed:
            segment.unlink()
            return None
        self._segments.append(segment)
        segment.lay_out(version, _plan(tensors)[0])
        return segment

    def _make_spares(self, size: int, count: int) -> None:
        with self._lock:
            if count <= 0 or self._making or self._closed:
                return
            self._making = True

        def make() -> None:
            try:
                for _ in range(count):
                    made = Segment.create(size)
                    with self._lock:
                        if self._closed:
                            made.unlink()
                            return
                        self._made.append(made)
            except OSError as exc:  # /dev/shm full: a publication makes its own, or says why
                log.warning("weights: could not prepare a shared-memory segment: %s", exc)
            finally:
                with self._lock:
                    self._making = False

        self._background.append(at_lowest_priority(make, "weights-shm"))

    def withdraw(self, segment: Segment) -> None:
        """``segment``'s version is no longer offered (superseded): idle once its readers let go."""
        segment.offered = False
        if segment.retired and segment in self._segments:
            self._drop(segment)

    def release(self, subscriber: bytes, seen: int, holding: Collection[str]) -> None:
        """``subscriber`` has dealt with (taken or refused) every announcement up to number ``seen``
        and its weights still use the segments ``holding``."""
        for segment in self._segments:
            offer = segment.lessees.get(subscriber)
            if offer is not None and offer <= seen and str(segment.path) not in holding:
                del segment.lessees[subscriber]

    def forget(self, subscriber: bytes) -> None:
        """A subscriber gone silent may still use its segments: retire them, never to be written
        again (the one still offered stays linked for others until withdrawn)."""
        for segment in [s for s in self._segments if subscriber in s.lessees]:
            segment.retired = True
            if not segment.offered:
                self._drop(segment)

    def _drop(self, segment: Segment) -> None:
        self._segments.remove(segment)
        self._background = [t for t in self._background if t.is_alive()]
        self._background.append(at_lowest_priority(segment.unlink, "weights-shm"))

    def close(self) -> None:
        """Unlink every file this pool made, after its background work (a spare being made is
        unlinked by its maker)."""
        with self._lock:
            self._closed = True
        for thread in self._background:
            thread.join(timeout=30.0)
        self._segments += self._made
        self._made.clear()
        for segment in self._segments:
            segment.unlink()
        self._segments.clear()


def open_segment(path: object, max_bytes: int) -> mmap.mmap:
    """Map the segment file ``path`` read-only, all its pages at once. Raises WireError for a path
    this module never makes, WeightRefused for a file over ``max_bytes``, OSError when the file
    cannot be read here (gone, another user's, another /dev/shm)."""
    if not isinstance(path, str) or Path(path).parent != SEGMENT_DIR or not _NAME.fullmatch(Path(path).name):
        raise WireError("schema", f"wshm: {path!r:.120} is not a weight segment")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise PermissionError(f"{path} is not a regular file of this user")
        if not _HEADER < info.st_size <= max_bytes:
            raise WeightRefused("oversized", f"segment of {info.st_size} bytes (at most {max_bytes})")
        return mmap.mmap(fd, info.st_size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE, prot=mmap.PROT_READ)
    finally:
        os.close(fd)


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


def read_segment(
    mapped: mmap.mmap,
    tensors: object,
    expected: Layout | None,
    max_tensors: int,
    *,
    wait_s: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, npt.NDArray[Any]]:
    """The announced ``tensors`` as read-only views of ``mapped``, each checked as a piece's are
    (:func:`check_tensor`) as soon as the publisher has written it (``wait_s`` at most for all).
    Raises WireError for a malformed announcement, WeightRefused for tensors that must not be
    installed or were never all written."""
    entries = _entries(tensors, max_tensors)
    views: list[tuple[str, npt.NDArray[Any]]] = []
    end = _HEADER
    for name, dtype, shape, offset in entries:  # in the order written: one after the other
        nbytes = int(np.prod(shape, dtype=np.int64)) * ALLOWED_DTYPES[dtype].itemsize
        if offset < end or offset + nbytes > len(mapped):
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
                raise WeightRefused("partial", f"tensor {name!r} was never written")
            time.sleep(0.0002)
        check_tensor(name, view, expected)
    return dict(views)


class SegmentLeases:
    """Subscriber side: the segments it keeps mapped, and which of them the views it handed out
    still use (reported in every ``want``). ``on_release`` is called, from whichever thread drops
    the last view of a segment, so that the publisher can hear of it at once."""

    def __init__(self, on_release: Callable[[], None], keep_mapped: int = 4) -> None:
        self._maps: OrderedDict[str, mmap.mmap] = OrderedDict()
        self._keep = keep_mapped
        self._views: dict[str, list[weakref.ref[npt.NDArray[Any]]]] = {}
        self._lock = threading.Lock()
        self._on_release = on_release

    def mapping(self, path: object, max_bytes: int) -> mmap.mmap:
        """``path`` mapped: the kept mapping, or a new one (see :func:`open_segment`)."""
        if isinstance(path, str) and path in self._maps:
            self._maps.move_to_end(path)
            return self._maps[path]
        mapped = open_segment(path, max_bytes)
        self._maps[str(path)] = mapped
        while len(self._maps) > self._keep:  # views keep their own mapping alive
            self._maps.popitem(last=False)
        return mapped

    def lend(self, path: str, tensors: Mapping[str, npt.NDArray[Any]]) -> None:
        """``tensors`` (views of ``path``) are handed out: the segment is held while any lives."""
        refs = [weakref.ref(view, self._released) for view in tensors.values() if view.base is not None]
        with self._lock:
            self._views[path] = refs

    def holding(self) -> list[str]:
        """The segments whose views are still in use."""
        with self._lock:
            self._views = {p: refs for p, refs in self._views.items() if any(r() is not None for r in refs)}
            return sorted(self._views)

    def _released(self, _: object) -> None:
        self._on_release()

    def close(self) -> None:
        """Let go of the kept mappings (views handed out keep their own)."""
        self._maps.clear()
