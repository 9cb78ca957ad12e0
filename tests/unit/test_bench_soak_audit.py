"""The soak bench's audit arithmetic and its learner's test-only fault hooks, on real files."""

from __future__ import annotations

import errno
import json
import math
from pathlib import Path

import pytest
import torch

from robotrl.bench import soak_audit as audit
from robotrl.bench.soak import is_durability_override
from robotrl.bench.soak_audit import Sample, missed_outside_faults, session_totals, version_drops
from robotrl.bench.soak_faults import FaultRecord
from robotrl.bench.soak_learner import FaultHooks
from robotrl.core import run_folder
from robotrl.learner.journal import LEDGER_FILE
from robotrl.transport.spool import Spool


def _session(folder: Path, transitions: int, received: list[list[int]]) -> Path:
    ckpt = folder / run_folder.CHECKPOINTS / "group-1"
    ckpt.mkdir(parents=True)
    (ckpt / run_folder.CHECKPOINT_COUNTERS).write_text(json.dumps({"transitions": transitions}))
    stream = {"actor_id": "actor-0", "stream": "s0", "received": received, "duplicates": 0, "numbered": 10}
    hostile = {"actor_id": "hostile-1", "stream": "h", "received": [], "duplicates": 0, "numbered": 2**40}
    (ckpt / LEDGER_FILE).write_text(json.dumps({"version": 1, "streams": [stream, hostile]}))
    (folder / run_folder.CHECKPOINTS / run_folder.CHECKPOINT_LATEST).write_text("group-1")
    return folder


def test_rows_and_ledgers_add_up_over_learner_sessions_and_a_hostile_id_is_named_not_counted(tmp_path):
    old = _session(tmp_path / "old", 300, [[0, 6]])
    new = _session(tmp_path / "new", 256, [[5, 10]])
    stored, ledger, ids, overlap = session_totals([old, new], {"actor-0"})
    assert stored == 556 and overlap == 1 and ids == {"actor-0", "hostile-1"}
    audit = ledger.audit()
    assert audit.received == 10 and audit.in_flight == 0


def test_versions_may_drop_once_per_new_session_and_deadlines_count_only_outside_fault_windows():
    assert version_drops([1, 2, 2, 5]) == 0 and version_drops([4, 5, 1, 2, 0]) == 2
    fault = FaultRecord("partition", start=10.0, end=13.0)
    samples = [Sample(5.0, "a", 1, 1, 0), Sample(14.0, "a", 1, 1, 2), Sample(30.0, "a", 1, 1, 3)]
    assert missed_outside_faults(samples, [fault]) == 1  # 2 within the window and its grace, 1 after


def test_only_overrides_that_change_durability_make_the_config_non_default():
    assert is_durability_override("learner.save_buffers=true")
    assert is_durability_override("learner.journal_max_mb=1")
    assert not is_durability_override("learner.batch_size=16")


def test_the_disk_full_hook_refuses_journal_writes_with_enospc_only_while_on(tmp_path, monkeypatch):
    monkeypatch.setattr(Spool, "write", Spool.write)  # restored after the test
    journal, other = Spool(tmp_path / "journal", 1 << 20), Spool(tmp_path / "spool", 1 << 20)
    hooks = FaultHooks(tmp_path / "journal")
    hooks.wrap_spool_write()
    hooks.on_disk_full_signal()
    with pytest.raises(OSError) as refused:
        journal.write("000000000000", [b"header"])
    assert refused.value.errno == errno.ENOSPC and hooks.journal_writes_refused == 1
    other.write("000000000000", [b"header"])  # another folder's disk is not full
    hooks.on_disk_full_signal()
    journal.write("000000000000", [b"header"])
    assert len(journal.files()) == 1


def test_the_nan_hook_poisons_the_policy_after_the_next_update_group_only():
    class Algorithm:
        def __init__(self) -> None:
            self.policy = torch.nn.Linear(2, 2)

        def update_group(self) -> dict[str, int]:
            return {"actor_updates": 1}

    class Learner:
        def __init__(self) -> None:
            self.algorithm = Algorithm()
            self.counters = type("Counters", (), {"policy_version": 7})()

    learner = Learner()
    hooks = FaultHooks(Path("unused"))
    hooks.wrap_update(learner)
    learner.algorithm.update_group()
    assert all(torch.isfinite(p).all() for p in learner.algorithm.policy.parameters())
    hooks.on_nan_signal()
    assert learner.algorithm.update_group() == {"actor_updates": 1}
    assert all(math.isnan(float(p.flatten()[0])) for p in learner.algorithm.policy.parameters())
    assert hooks.poison_next_update is False


def test_memory_growth_is_the_rise_of_the_floor_not_a_fault_windows_transient():
    start_up, flat = [100.0, 300.0, 400.0], [500.0] * 6
    held_during_a_fault = [*start_up, *flat[:3], 500.0, 590.0, 580.0, 500.0, 501.0, 500.0]
    leaking = [*start_up, *(500.0 + 30 * i for i in range(9))]
    growth = audit.memory_growth({"transient": held_during_a_fault, "leak": leaking})
    assert growth["transient"] < audit.MEMORY_GROWTH_MB <= growth["leak"]
