"""The tick rows of a replay ring: every transition column, stored column by column.

One array per column of :data:`robotrl.core.columns.COLUMNS` (a new column is stored,
saved and gathered back without an edit here), one memory-mapped file per camera so a
large buffer does not sit in RAM, and each distinct instruction once. A row that holds a
next observation keeps its observed columns and its episode; the other columns hold their
defaults.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from robotrl.core.batch import TransitionBatch
from robotrl.core.columns import ARRAY_COLUMNS, Dims

INSTRUCTION_FILE = "instruction.npy"
INSTRUCTIONS_FILE = "instructions.json"


class TickRows:
    """``capacity`` rows of ``dims`` and ``cameras``; the caller picks the positions and locks."""

    def __init__(
        self,
        dims: Dims,
        cameras: Mapping[str, tuple[int, int, int]],
        capacity: int,
        folder: str | Path | None,
        name: str,
    ) -> None:
        """``folder`` None: the images go to a temporary folder made here and removed with the rows."""
        self.cameras, self.name = dict(cameras), name
        self.folder = Path(tempfile.mkdtemp(prefix=f"robotrl-{name}-") if folder is None else folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        # A folder made here goes with the rows, closed or not (a dropped buffer must not fill /tmp).
        self._remove_folder = (
            weakref.finalize(self, shutil.rmtree, self.folder, True) if folder is None else None
        )
        self.columns: dict[str, npt.NDArray[Any]] = {
            c.name: np.full((capacity, *c.row_shape(dims)), c.default, c.dtype) for c in ARRAY_COLUMNS
        }
        self.images: dict[str, np.memmap[Any, np.dtype[np.uint8]]] = {
            cam: np.memmap(self.folder / f"{name}-{cam}.u8", np.uint8, "w+", shape=(capacity, *shape))
            for cam, shape in self.cameras.items()
        }
        self.instruction = np.zeros(capacity, np.int32)
        self.instructions: list[str] = []
        self._instruction_ids: dict[str, int] = {}

    def __getitem__(self, column: str) -> npt.NDArray[Any]:
        return self.columns[column]

    def write(self, rows: npt.NDArray[np.int64], nexts: npt.NDArray[np.int64], b: TransitionBatch) -> None:
        """Each row of ``b`` at ``rows``, its next observations at ``nexts``."""
        instr = np.array([self._instruction_id(t) for t in b.instructions], np.int32)
        for c in ARRAY_COLUMNS:
            self.columns[c.name][rows] = getattr(b, c.name)
            self.columns[c.name][nexts] = getattr(b, c.next_name) if c.next_name else c.default
        self.columns["episode_id"][nexts] = b.episode_id[b.next_rows]
        self.instruction[rows] = instr[b.instruction_index]
        self.instruction[nexts] = instr[b.instruction_index[b.next_rows]]
        for cam, mem in self.images.items():
            mem[rows] = b.images[cam]
            mem[nexts] = b.next_images[cam]

    def _instruction_id(self, text: str) -> int:
        if text not in self._instruction_ids:
            self._instruction_ids[text] = len(self.instructions)
            self.instructions.append(text)
        return self._instruction_ids[text]

    def task(self, rows: npt.NDArray[np.int64]) -> list[str]:
        return [self.instructions[k] for k in self.instruction[rows].tolist()]

    def gather(
        self, pos: npt.NDArray[np.int64], nxt: npt.NDArray[np.int64], actor_id: str
    ) -> TransitionBatch:
        """The rows at ``pos`` as one batch; ``nxt`` (none or one position) is the last row's next
        observation."""
        n = len(pos)
        batch = TransitionBatch.of(
            actor_id,
            {name: col[pos] for name, col in self.columns.items()},
            {c: np.asarray(m[pos]) for c, m in self.images.items()},
            tuple(self.instructions) or ("",),
            self.instruction[pos] if self.instructions else np.zeros(n, np.int32),
        )
        if not len(nxt):
            return batch
        return batch.ending_with(
            {name: col[nxt] for name, col in self.columns.items()},
            {c: np.asarray(m[nxt]) for c, m in self.images.items()},
        )

    # ----------------------------------------------------------------- persistence

    def files(self) -> list[str]:
        """The files :meth:`save` writes (images aside)."""
        return [f"{name}.npy" for name in self.columns] + [INSTRUCTION_FILE, INSTRUCTIONS_FILE]

    def save(self, folder: Path, used: int) -> None:
        """Write rows ``[0, used)``: a buffer's unwritten tail (most of it, early in a run, and
        gigabytes with cameras) is never copied to disk."""
        for name, col in self.columns.items():
            np.save(folder / f"{name}.npy", col[:used])
        np.save(folder / INSTRUCTION_FILE, self.instruction[:used])
        (folder / INSTRUCTIONS_FILE).write_text(json.dumps(self.instructions))
        for cam, mem in self.images.items():
            np.save(folder / f"images-{cam}.npy", mem[:used])

    def load(self, folder: Path) -> None:
        """Restore what :meth:`save` wrote; rows past the saved ones get their defaults."""
        for c in ARRAY_COLUMNS:
            saved = np.load(folder / f"{c.name}.npy", allow_pickle=False)
            col = self.columns[c.name]
            col[: len(saved)] = saved
            col[len(saved) :] = c.default
        saved_instruction = np.load(folder / INSTRUCTION_FILE, allow_pickle=False)
        self.instruction[: len(saved_instruction)] = saved_instruction
        self.instruction[len(saved_instruction) :] = 0
        self.instructions = list(json.loads((folder / INSTRUCTIONS_FILE).read_text()))
        self._instruction_ids = {t: i for i, t in enumerate(self.instructions)}
        for cam, mem in self.images.items():
            saved = np.load(folder / f"images-{cam}.npy", mmap_mode="r", allow_pickle=False)
            for lo in range(0, len(saved), 4096):
                hi = min(lo + 4096, len(saved))
                mem[lo:hi] = saved[lo:hi]

    def close(self) -> None:
        """Release the memory maps; delete the folder when it was made here."""
        for mem in self.images.values():
            mem._mmap.close()  # type: ignore[attr-defined]
        self.images.clear()
        if self._remove_folder is not None:
            self._remove_folder()
