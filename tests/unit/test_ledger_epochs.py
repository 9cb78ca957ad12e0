"""The ledger's per-actor epochs: the newest process wins, an older one is fenced, the epoch
survives the checkpoint's JSON, and pings from an id that never delivered a batch store nothing."""

from __future__ import annotations

import json

from robotrl.transport.ledger import SeqLedger


def test_the_newest_process_supersedes_and_an_older_one_is_fenced():
    ledger = SeqLedger()
    ledger.record("actor-0", "stream-a", 0)  # the first process's batch
    assert ledger.claim_epoch("actor-0", "stream-b")
    assert ledger.claim_epoch("actor-0", "stream-c")  # a newer process takes over
    assert not ledger.claim_epoch("actor-0", "stream-b")
    assert ledger.claim_epoch("actor-0", "stream-c") and ledger.epoch("actor-0") == "stream-c"


def test_the_epoch_survives_the_checkpoints_json():
    ledger = SeqLedger()
    ledger.record("actor-0", "stream-a", 0)
    ledger.claim_epoch("actor-0", "stream-c")
    restored = SeqLedger.from_json(json.loads(json.dumps(ledger.to_json())))
    assert restored.epoch("actor-0") == "stream-c"
    assert not restored.claim_epoch("actor-0", "stream-b")


def test_pings_alone_store_no_epoch():
    ledger = SeqLedger()
    assert all(ledger.claim_epoch(f"fake-{i}", "stream") for i in range(1000))
    assert ledger.to_json()["epochs"] == {}
