"""Durability parts on real files: fsync observed through the injected sync, temporary files
cleaned after a failed write and at start, a ledger entry handed back, sparse log lines."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from robotrl.core.batch import TransitionBatch
from robotrl.core.fsync import Fsync
from robotrl.core.log_limit import EveryFewSeconds
from robotrl.core.run_folder import CHECKPOINT_POLICY
from robotrl.core.types import Observation, Transition
from robotrl.learner.checkpoint import Checkpointer, Counters
from robotrl.learner.journal import Journal
from robotrl.transport.ledger import RangeSet, SeqLedger
from robotrl.transport.spool import Spool
from robotrl.transport.transition_receiver import Received


def batch(index: int) -> TransitionBatch:
    action = np.zeros(6, np.float32)
    obs = Observation(0, np.full(8, index, np.float32), {}, "reach", 0.0)
    return TransitionBatch.from_transitions(
        [Transition("a", 0, 0, obs, action, action, 0.0, False, False, False, 0, 0, 0, 0)]
    )


class RecordingSync:
    """An fsync that really syncs and remembers what it was given (a file or a folder)."""

    def __init__(self) -> None:
        self.kinds: list[str] = []

    def __call__(self, fd: int) -> None:
        os.fsync(fd)
        self.kinds.append("folder" if os.path.isdir(f"/proc/self/fd/{fd}") else "file")


def full_disk(fd: int) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_journal_fsyncs_each_batch_file_and_its_folder_unless_relaxed(tmp_path):
    sync = RecordingSync()
    journal = Journal(tmp_path / "j", 1 << 20, Fsync(True, sync))
    journal.append(Received("a", "s1", 0, batch(0)))
    assert sync.kinds == ["file", "folder"]
    relaxed = RecordingSync()
    Journal(tmp_path / "k", 1 << 20, Fsync(False, relaxed)).append(Received("a", "s1", 0, batch(0)))
    assert relaxed.kinds == []


def test_spool_write_that_fails_leaves_no_temporary_file_and_no_budget_used(tmp_path):
    spool = Spool(tmp_path, 1 << 20, Fsync(True, full_disk))
    with pytest.raises(OSError):
        spool.write("000", [b"frame"])
    assert list(tmp_path.iterdir()) == [] and spool.used == 0


def test_spool_removes_half_written_files_at_start(tmp_path):
    (tmp_path / "x-0000000000000001.tmp").write_bytes(b"RRSPOOL1 cut short")
    Spool(tmp_path, 1 << 20)
    assert list(tmp_path.iterdir()) == []


def save(checkpointer: Checkpointer, **kwargs: Any) -> Path:
    return checkpointer.save({"step": 1}, Counters(1, 1, 10), {"w": np.zeros(3, np.float32)}, **kwargs)


def test_checkpoint_fsyncs_every_file_and_folder_before_latest_names_it(tmp_path):
    sync = RecordingSync()
    save(Checkpointer(tmp_path, Fsync(True, sync)), extra_json={"ledger.json": {}})
    # state.pt, policy.safetensors, ledger.json, counters.json; the checkpoint's folder, its parent
    # after the rename; the last_good and latest pointers and their folder each
    assert sync.kinds.count("file") == 6 and sync.kinds.count("folder") == 4
    relaxed = RecordingSync()
    save(Checkpointer(tmp_path / "relaxed", Fsync(False, relaxed)))
    assert relaxed.kinds == []


def test_a_checkpoint_keeps_every_policy_tensor_s_shape_a_scalar_included(tmp_path):
    from safetensors.numpy import load_file

    weights = {"scale": np.array(2.0, np.float32), "w": np.arange(6, dtype=np.float32)[::2]}
    folder = Checkpointer(tmp_path).save({}, Counters(), weights)
    saved = load_file(str(folder / CHECKPOINT_POLICY))
    assert {k: v.shape for k, v in saved.items()} == {"scale": (), "w": (3,)}
    assert saved["scale"] == 2.0 and saved["w"].tolist() == [0.0, 2.0, 4.0]


def test_failed_checkpoint_leaves_no_temporary_folder_and_keeps_the_previous_latest(tmp_path):
    checkpointer = Checkpointer(tmp_path)
    good = save(checkpointer)

    def disk_full(folder: Path) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    for _ in range(3):
        with pytest.raises(OSError):
            save(checkpointer, save_buffers=disk_full)
    assert sorted(p.name for p in checkpointer.root.iterdir()) == [good.name, "last_good", "latest"]
    assert checkpointer.latest() == good


def test_leftover_temporary_checkpoints_are_removed_at_start(tmp_path):
    root = tmp_path / "checkpoints"
    (root / ".tmp-group-00000003-abc").mkdir(parents=True)
    (root / ".tmp-group-00000003-abc" / "state.pt").write_bytes(b"half")
    (root / ".latest.tmp").write_text("group-00000003-abc")
    Checkpointer(tmp_path).remove_leftovers()
    assert list(root.iterdir()) == []


def test_ledger_forgets_a_handed_back_batch_so_its_resend_is_taken():
    ledger = SeqLedger()
    for seq in range(3):
        ledger.record("a", "s", seq)
    ledger.forget("a", "s", 1)
    assert not ledger.seen("a", "s", 1) and ledger.seen("a", "s", 0) and ledger.seen("a", "s", 2)
    assert ledger.record("a", "s", 1) and ledger.audit().duplicates == 0
    ranges = RangeSet([(0, 5)])
    for x in (0, 4, 2, 9):
        ranges.discard(x)
    assert ranges.ranges() == [(1, 2), (3, 4)]


def test_repeated_event_logs_one_line_per_period_with_its_count(caplog):
    now = [0.0]
    limited = EveryFewSeconds(logging.getLogger("t"), logging.ERROR, period_s=10, clock=lambda: now[0])
    with caplog.at_level(logging.ERROR):
        for i in range(1000):
            now[0] = i * 0.03  # 1000 events over 30 s
            limited.event("batch %d refused", i)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3 and limited.total == 1000
    assert lines[0] == "batch 0 refused (1 times since the last such line, 1 in all)"
    assert lines[1].endswith("(334 times since the last such line, 335 in all)")
