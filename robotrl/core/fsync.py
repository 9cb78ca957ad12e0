"""fsync of files and of the folders that name them, or nothing when the user relaxed it.

A rename makes a write atomic, not durable: after a power cut the page cache is gone, and
so is a file (or the rename that named it) the disk never saw. Durable writes therefore
fsync the file before the rename and its folder after it. The spool, the journal and the
checkpoints share this one class, so ``transport.fsync`` and ``learner.fsync`` turn it off
in one place each, and a test can pass its own ``sync`` to see it called.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


class Fsync:
    """Flush files and folders to the disk when ``enabled``; ``calls`` counts what it synced."""

    def __init__(self, enabled: bool = True, sync: Callable[[int], None] = os.fsync) -> None:
        self.enabled = enabled
        self._sync = sync
        self.calls = 0

    def file(self, f: BinaryIO) -> None:
        """Flush ``f`` (open for writing) to the disk."""
        f.flush()
        if self.enabled:
            self._sync(f.fileno())
            self.calls += 1

    def folder(self, path: Path) -> None:
        """Make the names in ``path`` (a rename, a new file) reach the disk."""
        if not self.enabled:
            return
        fd = os.open(path, os.O_RDONLY)
        try:
            self._sync(fd)
            self.calls += 1
        finally:
            os.close(fd)

    def write_bytes(self, path: Path, data: bytes) -> None:
        """Replace ``path`` with ``data`` atomically and durably (a crash leaves old or new)."""
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                self.file(f)
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        self.folder(path.parent)

    def tree(self, root: Path) -> None:
        """Sync every file and folder under ``root`` (a checkpoint written by several libraries)."""
        if not self.enabled:
            return
        for folder, _, names in os.walk(root):
            for name in names:
                with open(Path(folder) / name, "rb") as f:
                    self.file(f)
            self.folder(Path(folder))


NO_FSYNC = Fsync(enabled=False)
"""For files whose loss costs nothing but a redo (progress, status)."""
