"""The transport's small parts: ranges and ledger, liveness, spool file format, weight checks, the
link's waker."""

from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest
import zmq

from robotrl.config.schema import RobotRLConfig, problems
from robotrl.core.clock import VirtualClock
from robotrl.core.types import WeightUpdate
from robotrl.transport.background import LogBudget
from robotrl.transport.heartbeat import Liveness
from robotrl.transport.ledger import RangeSet, SeqLedger
from robotrl.transport.link import Waker, _Poll
from robotrl.transport.spool import Spool, SpoolFullError
from robotrl.transport.transitions import new_stream_id
from robotrl.transport.weight_checks import WeightRefused, all_finite, verify
from robotrl.transport.weights import split_pieces
from robotrl.wire.codec import Message, encode


def test_range_set_merges_neighbours_and_lists_gaps():
    r = RangeSet()
    for x in (5, 0, 2, 1, 9, 6):
        assert r.add(x)
    assert not r.add(2)
    assert r.ranges() == [(0, 3), (5, 7), (9, 10)]
    assert r.gaps(12) == [(3, 5), (7, 9), (10, 12)]
    assert r.count() == 6 and 6 in r and 7 not in r


def test_stream_ids_made_in_one_process_sort_in_the_order_they_were_made():
    # Many fall in one millisecond: the later sender must still hold the newer epoch.
    ids = [new_stream_id() for _ in range(2000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(a[:12] < b[:12] for a, b in itertools.pairwise(ids))
    ledger = SeqLedger()
    ledger.record("actor-0", ids[0], 0)
    assert ledger.claim_epoch("actor-0", ids[1]) and not ledger.claim_epoch("actor-0", ids[0])


def test_ledger_counts_duplicates_and_missing_and_survives_json():
    ledger = SeqLedger()
    for seq in (0, 1, 3):
        assert ledger.record("a", "s", seq)
    assert not ledger.record("a", "s", 1)
    ledger.numbered("a", "s", 6)
    (acct,) = ledger.accounts()
    assert (acct.received, acct.duplicates, acct.numbered, acct.missing) == (3, 1, 6, [(2, 3), (4, 6)])
    restored = SeqLedger.from_json(ledger.to_json())
    assert restored.accounts() == ledger.accounts() and restored.seen("a", "s", 3)
    with pytest.raises(ValueError, match="format version 7"):
        SeqLedger.from_json({"version": 7, "streams": []})


def test_ledger_keeps_few_superseded_streams_and_its_audit_still_counts_them():
    capped, full = SeqLedger(keep_superseded=2), SeqLedger(keep_superseded=1000)
    for ledger in (capped, full):
        for life in range(10):  # ten incarnations of actor a: seq 1 of each never arrived
            for seq in (0, 2):
                ledger.record("a", f"{life:06d}", seq)
            ledger.numbered("a", f"{life:06d}", 4, dropped=1)
        assert not ledger.numbered("ghost", "s", 10**9)  # a ping never creates a stream
    assert [a.stream for a in capped.accounts()] == ["000007", "000008", "000009"]
    assert capped.audit() == full.audit() and full.audit().lost_to_actor_crash == 9
    assert SeqLedger.from_json(capped.to_json()).audit() == capped.audit()


def test_log_budget_allows_a_burst_then_a_steady_rate_per_kind():
    clock = VirtualClock()
    budget = LogBudget(lines_per_s=2.0, burst=5, clock=clock.now)
    assert sum(budget.allow("rejected") for _ in range(1000)) == 5
    assert budget.allow("connected")  # another kind has its own budget
    clock.advance(10.0)
    assert sum(budget.allow("rejected") for _ in range(1000)) == 5  # refilled up to the burst
    clock.advance(1.0)
    assert sum(budget.allow("rejected") for _ in range(1000)) == 2


def test_peer_is_dead_after_the_timeout_and_heartbeats_are_due_each_period():
    clock = VirtualClock()
    live = Liveness(1.0, 3.0, clock.now)
    assert not live.alive() and live.beat_due() and not live.beat_due()
    live.heard()
    clock.advance(3.0)
    assert live.alive() and live.beat_due()
    clock.advance(0.01)
    assert not live.alive()
    with pytest.raises(ValueError):
        Liveness(1.0, 1.0, clock.now)


def test_a_poll_may_wait_only_until_the_next_heartbeat():
    clock = VirtualClock()
    live = Liveness(1.0, 3.0, clock.now)
    assert live.ms_to_beat() == 0  # the first beat is due at once
    assert live.beat_due()
    clock.advance(0.2495)
    assert live.ms_to_beat() == 751  # rounded up: a poll never ends before the beat is due
    clock.advance(2.0)
    assert live.ms_to_beat() == 0
    live.forget()
    assert live.ms_to_beat() == 0


def test_spool_round_trips_frames_and_keeps_its_budget(tmp_path):
    message = Message("ping", "a", 3, {"x": np.arange(10, dtype=np.float32)}, {"stream": "s"})
    probe = Spool(tmp_path / "probe", max_bytes=1 << 20)
    size = probe.write("x", encode(message)).stat().st_size
    spool = Spool(tmp_path / "spool", max_bytes=2 * size + size // 2)
    path = spool.write("s-0", encode(message))
    _, decoded = spool.load(path)
    assert decoded.seq == 3 and decoded.arrays["x"].tolist() == list(range(10))
    spool.write("s-1", encode(message))
    with pytest.raises(SpoolFullError):
        spool.write("s-2", encode(message))
    assert (
        Spool(tmp_path / "spool", 0).used == spool.used == 2 * size
    )  # a restarted actor counts what is there


def test_a_damaged_spool_file_is_refused_and_removed(tmp_path):
    spool = Spool(tmp_path, max_bytes=1 << 20)
    path = spool.write("s-0", encode(Message("ping", "a", 0, {"x": np.ones(8, np.float32)})))
    path.write_bytes(path.read_bytes()[:-5])
    assert spool.load(path) is None and not path.exists()


def _update(tensors, version=1, subset="full"):
    return WeightUpdate.build(version, tensors, subset)


def test_verify_refuses_each_kind_of_bad_update():
    layout = {"w": ((2, 3), np.dtype(np.float32)), "b": ((3,), np.dtype(np.float32))}
    good = {"w": np.ones((2, 3), np.float32), "b": np.zeros(3, np.float32)}
    verify(_update(good), layout)
    verify(_update({"b": good["b"]}, subset="trainable"), layout)
    cases = {
        "names": [_update({"b": good["b"]}), _update({**good, "extra": good["b"]})],
        "shape": [_update({**good, "w": np.ones((3, 2), np.float32)})],
        "dtype": [_update({**good, "w": np.ones((2, 3), np.float64)})],
        "non_finite": [_update({**good, "b": np.array([0, np.inf, 0], np.float32)})],
    }
    for reason, updates in cases.items():
        for update in updates:
            with pytest.raises(WeightRefused) as info:
                verify(update, layout)
            assert info.value.reason == reason
    forged = WeightUpdate(1, good, "0" * 64)
    with pytest.raises(WeightRefused, match="digest"):
        verify(forged, layout)


def test_finiteness_check_is_exact_when_a_sum_overflows():
    assert all_finite(np.full(4, 3e38, np.float32))
    assert not all_finite(np.array([1, np.nan], np.float16))


def test_pieces_group_whole_tensors_in_name_order():
    tensors = {n: np.zeros(s, np.uint8) for n, s in (("a", 40), ("b", 40), ("c", 100), ("d", 10))}
    assert split_pieces(tensors, 90) == [["a", "b"], ["c"], ["d"]]


def test_transport_config_problems_name_the_field():
    cfg = RobotRLConfig()
    cfg.transport.send_window = 0
    cfg.transport.weights_piece_mb = -1
    cfg.transport.transitions_endpoint = "localhost:5555"
    fields = {f for f, _ in problems(cfg)}
    assert {"transport.send_window", "transport.weights_piece_mb", "transport.transitions_endpoint"} <= fields


def test_a_waker_ends_a_poll_that_would_wait_forever_and_is_harmless_once_closed():
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    sock.bind("inproc://waker-test")
    waker = Waker()
    poll = _Poll(sock, waker)
    result: list[bool] = []
    done = threading.Event()

    def wait() -> None:
        result.append(poll(lambda: -1))  # no timeout: only a message or a wake ends it
        done.set()

    thread = threading.Thread(target=wait, daemon=True)
    try:
        thread.start()
        while not done.is_set():  # a wake before the poll begins writes nothing: the loop
            waker.wake()  # looks for work first; so wake until the poll has begun and ended
            done.wait(0.01)
        assert result == [False]  # woken, no message waiting
        assert not poll(lambda: 0)
    finally:
        waker.close()
        sock.close(linger=0)
        ctx.term()
    waker.wake()  # after close: nothing written anywhere (the descriptor may be another file's now)
    waker.close()
