"""A bounded disk spool of encoded messages: where unacknowledged batches wait.

One file per message, holding exactly the codec's frames (no pickle): the magic
``RRSPOOL1``, a little-endian u32 frame count, one u64 length per frame, then the
frames. Files are written to a temporary name, fsynced, renamed and their folder
fsynced (unless the :class:`~robotrl.core.fsync.Fsync` given is relaxed), so a crash or
a power cut leaves either a whole file or none; a temporary file a crash or a failed
write left behind is deleted at start and after the failure. Reading a file back
re-validates it with the codec, so a damaged file is refused (and deleted) rather than sent.
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

from robotrl.core.fsync import Fsync
from robotrl.wire.codec import Frame, Message, WireError, decode

log = logging.getLogger(__name__)

MAGIC = b"RRSPOOL1"
SUFFIX = ".rrspool"
_MAX_FRAMES = 4096


class SpoolFullError(Exception):
    """Writing would exceed the spool's byte budget."""


class Spool:
    """Files under ``directory``, at most ``max_bytes`` in all."""

    def __init__(self, directory: str | Path, max_bytes: int, fsync: Fsync | None = None) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.fsync = fsync if fsync is not None else Fsync()
        self._remove_partial_writes()
        self.used = sum(p.stat().st_size for p in self.directory.glob(f"*{SUFFIX}"))

    def write(self, name: str, frames: list[Frame]) -> Path:
        """Store ``frames`` as ``name``; raises :class:`SpoolFullError` past the budget."""
        views = [memoryview(f).cast("B") for f in frames]
        head = MAGIC + struct.pack(f"<I{len(views)}Q", len(views), *(len(v) for v in views))
        size = len(head) + sum(len(v) for v in views)
        if self.used + size > self.max_bytes:
            raise SpoolFullError(f"spool {self.directory}: {self.used + size} bytes > {self.max_bytes}")
        path = self.directory / f"{name}{SUFFIX}"
        tmp = path.with_suffix(".tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(head)
                for v in views:
                    f.write(v)
                self.fsync.file(f)
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)  # a disk full half way: no partial file left behind
            raise
        self.fsync.folder(self.directory)
        self.used += size
        return path

    def read(self, path: Path) -> list[bytes]:
        """The frames stored in ``path``; raises WireError('truncated'/'header') when damaged."""
        data = path.read_bytes()
        if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 4:
            raise WireError("header", f"{path} is not a spool file")
        (count,) = struct.unpack_from("<I", data, len(MAGIC))
        if not 1 <= count <= _MAX_FRAMES:
            raise WireError("frame_count", f"{path} declares {count} frames")
        at = len(MAGIC) + 4 + 8 * count
        if len(data) < at:
            raise WireError("truncated", f"{path} ends inside its frame table")
        lengths = struct.unpack_from(f"<{count}Q", data, len(MAGIC) + 4)
        if at + sum(lengths) != len(data):
            raise WireError(
                "truncated", f"{path} holds {len(data) - at} frame bytes, table says {sum(lengths)}"
            )
        frames = []
        for n in lengths:
            frames.append(data[at : at + n])
            at += n
        return frames

    def load(self, path: Path) -> tuple[list[bytes], Message] | None:
        """Frames and decoded header of a stored message, or None (file deleted) when damaged."""
        try:
            frames = self.read(path)
            return frames, decode(frames)
        except (WireError, OSError) as exc:
            log.warning("spool: dropping damaged file %s (%s)", path, exc)
            self.remove(path)
            return None

    def remove(self, path: Path) -> None:
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            return
        self.used = max(0, self.used - size)

    def files(self) -> list[Path]:
        """Stored messages, oldest name first (names sort by stream then sequence number)."""
        self._remove_partial_writes()
        return sorted(self.directory.glob(f"*{SUFFIX}"))

    def _remove_partial_writes(self) -> None:
        for tmp in self.directory.glob("*.tmp"):
            tmp.unlink(missing_ok=True)  # a write cut short by a crash
