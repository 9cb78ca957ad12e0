"""The learner's write-ahead journal: batches received since the last checkpoint, on disk.

The transition link acknowledges a batch once the learner has taken it, and an
acknowledged batch is gone from the actor. The replay buffer lives in memory between
checkpoints, so without this journal a learner killed between two checkpoints would
lose every batch it acknowledged since the first. The learner therefore writes each
batch here (the codec's frames, no pickle; one file per batch, written, fsynced, renamed)
*before* the next receive acknowledges it; a batch the journal refuses (over its budget,
disk full, any OSError) is handed back to the link unacknowledged, so the actor keeps it
and sends it again (by then a checkpoint may have emptied the journal). It empties the
journal when a checkpoint with the buffers and the transport ledger is complete. After
a restart the journal is read back into the buffers and its batches into the ledger
before the link opens, so what an actor resends is recognised as already taken.

With ``learner.fsync`` (the default) a journal file and its folder are fsynced, so it
survives a power cut too; without, only a killed process.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

from robotrl.core.fsync import Fsync
from robotrl.core.protocols import StreamBatch
from robotrl.transport.ledger import SeqLedger
from robotrl.transport.spool import Spool
from robotrl.transport.transition_receiver import Received
from robotrl.wire.codec import Message, WireError, encode
from robotrl.wire.messages import message_to_transition_batch, transition_batch_to_message

log = logging.getLogger(__name__)

LEDGER_FILE = "ledger.json"


class Journal:
    """Batches taken since the last checkpoint, oldest first, at most ``max_bytes``."""

    def __init__(self, directory: str | Path, max_bytes: int, fsync: Fsync | None = None) -> None:
        self._spool = Spool(directory, max_bytes, fsync)
        files = self._spool.files()
        self._next = int(files[-1].name.split(".")[0]) + 1 if files else 0

    @property
    def directory(self) -> Path:
        return self._spool.directory

    @property
    def fsync(self) -> Fsync:
        return self._spool.fsync

    def append(self, item: StreamBatch) -> None:
        """Write ``item``; raises :class:`SpoolFullError` (over budget) or OSError (the disk)."""
        plain = transition_batch_to_message(item.batch, item.seq)
        message = Message(
            plain.kind, item.actor_id, item.seq, plain.arrays, {**plain.meta, "stream": item.stream}
        )
        self._spool.write(f"{self._next:012d}", encode(message))
        self._next += 1

    def files(self) -> list[Path]:
        return self._spool.files()

    def read(self) -> Iterator[tuple[Path, Received]]:
        """Every journaled batch, oldest first; a damaged file is logged and deleted."""
        for path in self._spool.files():
            loaded = self._spool.load(path)
            if loaded is None:
                continue
            message = loaded[1]
            stream = message.meta.get("stream")
            try:
                if not isinstance(stream, str):
                    raise WireError("schema", "no stream")
                batch = message_to_transition_batch(message)
            except WireError as exc:
                log.warning("journal: %s is not a transition batch (%s); dropped", path, exc)
                self._spool.remove(path)
                continue
            yield path, Received(message.sender, stream, message.seq, batch)

    def remove(self, paths: list[Path]) -> None:
        """Forget batches a complete checkpoint now holds."""
        for path in paths:
            self._spool.remove(path)


def load_ledger(checkpoint: Path | None) -> SeqLedger:
    """The transport ledger saved in ``checkpoint`` (an empty one without a checkpoint)."""
    if checkpoint is None or not (checkpoint / LEDGER_FILE).exists():
        return SeqLedger()
    return SeqLedger.from_json(json.loads((checkpoint / LEDGER_FILE).read_text()))


def restored_ledger(checkpoint: Path | None, journal: Journal | None) -> SeqLedger:
    """The checkpoint's ledger plus every journaled batch: what the learner holds after a restart.

    The transition receiver starts from this ledger, so a batch an actor resends after
    the restart is acknowledged and skipped when the learner already holds it."""
    ledger = load_ledger(checkpoint)
    for _, item in journal.read() if journal is not None else ():
        if not ledger.seen(item.actor_id, item.stream, item.seq):
            ledger.record(item.actor_id, item.stream, item.seq)
    return ledger
