"""The reliability parts on their own: the learner's journal, the ledger's audit by cause."""

from __future__ import annotations

import json

import numpy as np
import pytest

from robotrl.config.schema import RobotRLConfig, problems
from robotrl.core.batch import TransitionBatch
from robotrl.core.types import Observation, Transition
from robotrl.learner.journal import Journal, restored_ledger
from robotrl.transport.ledger import SeqLedger
from robotrl.transport.spool import SpoolFullError
from robotrl.transport.transition_receiver import Received


def batch(index: int) -> TransitionBatch:
    action = np.zeros(6, np.float32)

    def row(t: int) -> Transition:
        obs = Observation(t, np.full(8, index, np.float32), {}, "reach", 0.0)
        return Transition("a", 0, t, obs, action, action, 0.0, False, False, False, 0, t, 0, 0)

    return TransitionBatch.from_transitions([row(t) for t in range(3)])


def test_journal_round_trips_batches_in_order_and_forgets_what_a_checkpoint_holds(tmp_path):
    journal = Journal(tmp_path / "j", 1 << 20)
    for seq in range(4):
        journal.append(Received("a", "s1", seq, batch(seq)))
    got = list(journal.read())
    assert [(r.actor_id, r.stream, r.seq) for _, r in got] == [("a", "s1", s) for s in range(4)]
    assert [int(r.batch.state[0, 0]) for _, r in got] == [0, 1, 2, 3]
    journal.remove([path for path, _ in got[:3]])
    reopened = Journal(tmp_path / "j", 1 << 20)  # a restarted learner numbers after what is left
    reopened.append(Received("a", "s1", 4, batch(4)))
    assert [r.seq for _, r in reopened.read()] == [3, 4]


def test_journal_over_budget_refuses_and_keeps_nothing(tmp_path):
    journal = Journal(tmp_path / "j", 10)
    with pytest.raises(SpoolFullError):
        journal.append(Received("a", "s1", 0, batch(0)))
    assert journal.files() == []


def test_damaged_journal_file_is_dropped_not_replayed(tmp_path):
    journal = Journal(tmp_path / "j", 1 << 20)
    journal.append(Received("a", "s1", 0, batch(0)))
    journal.append(Received("a", "s1", 1, batch(1)))
    first = journal.files()[0]
    first.write_bytes(first.read_bytes()[:-5])  # cut short
    assert [r.seq for _, r in journal.read()] == [1]


def test_restored_ledger_is_the_checkpoints_plus_the_journal_without_counting_duplicates(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    saved = SeqLedger()
    saved.record("a", "s1", 0)
    (ckpt / "ledger.json").write_text(json.dumps(saved.to_json()))
    journal = Journal(tmp_path / "j", 1 << 20)
    journal.append(Received("a", "s1", 0, batch(0)))  # saved and still journaled (crash mid-cleanup)
    journal.append(Received("a", "s1", 1, batch(1)))
    ledger = restored_ledger(ckpt, journal)
    assert ledger.seen("a", "s1", 1) and ledger.audit().duplicates == 0 and ledger.audit().received == 2


def test_audit_splits_missing_batches_by_cause():
    ledger = SeqLedger()
    for seq in (0, 1, 3):  # the first life of actor a: 2 and 4 never arrived, then it died
        ledger.record("a", "000001old", seq)
    ledger.numbered("a", "000001old", 5)
    for seq in (0, 2):  # its second life: 1 still in flight, 3 and 4 dropped (spool full)
        ledger.record("a", "000002new", seq)
    ledger.numbered("a", "000002new", 5, dropped=2)
    audit = ledger.audit()
    assert (audit.received, audit.lost_to_actor_crash, audit.dropped_by_actor, audit.in_flight) == (
        5,
        2,
        2,
        1,
    )
    again = SeqLedger.from_json(ledger.to_json()).audit()
    assert again == audit


def test_journal_budget_must_be_positive():
    cfg = RobotRLConfig()
    cfg.learner.journal_max_mb = 0
    assert any(field == "learner.journal_max_mb" for field, _ in problems(cfg))
