"""The tick-indexed action queue and the four merge strategies."""

from __future__ import annotations

import numpy as np
import pytest

from robotrl.actor.queue import ActionQueue, ChunkRefusedError
from robotrl.config.actor import Strategy
from robotrl.core.types import ActionChunk

H, A = 8, 2


def chunk(
    chunk_id: int,
    obs_tick: int,
    ready_tick: int,
    start_tick: int | None = None,
    epoch: int = 1,
    base: float = 0.0,
) -> ActionChunk:
    start = obs_tick if start_tick is None else start_tick
    rows = np.arange(H, dtype=np.float32)[:, None] + start + base
    return ActionChunk(
        chunk_id,
        np.repeat(rows, A, axis=1),
        obs_tick,
        ready_tick,
        start,
        policy_version=chunk_id,
        epoch=epoch,
    )


def queue(strategy: Strategy, decay: float = 0.5) -> ActionQueue:
    q = ActionQueue(A, H, strategy, decay)
    q.reset()
    return q


def test_executed_ticks_are_dropped_and_new_chunk_runs_from_its_first_future_tick():
    q = queue(Strategy.naive_async)
    q.merge(chunk(0, 0, 0), now=0)
    assert [q.pop(t).action[0] for t in (0, 1, 2)] == [0.0, 1.0, 2.0]
    q.merge(chunk(1, obs_tick=1, ready_tick=3, base=100.0), now=3)
    got = q.pop(3)
    assert got is not None
    assert (got.chunk_id, got.index_in_chunk, got.action[0]) == (1, 2, 103.0)
    assert q.remaining(4) == H - 3


def test_pop_skips_ticks_that_time_has_passed():
    q = queue(Strategy.naive_async)
    q.merge(chunk(0, 0, 0), now=0)
    got = q.pop(5)
    assert got is not None and got.action[0] == 5.0
    assert q.pop(H) is None  # past the plan's end: starved


def test_sync_chunk_starts_at_its_first_row_when_it_arrives():
    q = queue(Strategy.sync)
    q.merge(chunk(0, obs_tick=4, ready_tick=7, start_tick=7), now=7)
    got = q.pop(7)
    assert got is not None and got.index_in_chunk == 0 and got.delay_ticks == 3


def test_blend_weighs_old_then_new_on_the_overlap():
    q = queue(Strategy.blend, decay=0.5)
    q.merge(chunk(0, 0, 0, base=0.0), now=0)
    q.merge(chunk(1, obs_tick=0, ready_tick=2, base=100.0), now=2)
    a2, a3, a4 = (q.pop(t).action[0] for t in (2, 3, 4))
    assert a2 == pytest.approx(0.5 * 2 + 0.5 * 102)
    assert a3 == pytest.approx(0.25 * 3 + 0.75 * 103)
    assert a4 == pytest.approx(0.125 * 4 + 0.875 * 104)
    for t in range(5, H):  # old plan ends at H; the new chunk alone after it
        q.pop(t)
    assert q.remaining(H) == 0


def test_prefix_merge_switches_at_arrival_like_naive():
    q = queue(Strategy.prefix)
    q.merge(chunk(0, 0, 0), now=0)
    committed = q.committed(1, 3)
    np.testing.assert_array_equal(committed[:, 0], [1.0, 2.0, 3.0])
    q.merge(chunk(1, obs_tick=1, ready_tick=4, base=50.0), now=4)
    got = q.pop(4)
    assert got is not None and got.chunk_id == 1 and got.action[0] == 54.0


def test_committed_prefix_longer_than_the_plan_is_an_error():
    q = queue(Strategy.prefix)
    q.merge(chunk(0, 0, 0), now=0)
    with pytest.raises(ValueError, match="planned actions"):
        q.committed(5, 4)


def test_reset_discards_the_plan_and_refuses_chunks_of_the_old_epoch():
    q = queue(Strategy.naive_async)
    q.merge(chunk(0, 0, 0, epoch=1), now=0)
    q.reset()
    assert q.remaining(0) == 0 and q.pop(0) is None
    with pytest.raises(ChunkRefusedError) as info:
        q.merge(chunk(1, 0, 2, epoch=1), now=2)
    assert info.value.reason == "stale_epoch"
    assert q.pop(2) is None


@pytest.mark.parametrize(
    ("actions", "reason"),
    [
        (np.zeros((H, A + 1), np.float32), "shape"),
        (np.zeros((H - 1, A), np.float32), "shape"),
        (np.full((H, A), np.nan, np.float32), "non_finite"),
        (np.zeros((H, A), np.float64), "dtype"),
    ],
)
def test_bad_chunks_are_refused_before_reaching_the_plan(actions, reason):
    q = queue(Strategy.naive_async)
    bad = ActionChunk(3, actions, 0, 1, 0, 0, epoch=1)
    with pytest.raises(ChunkRefusedError) as info:
        q.merge(bad, now=1)
    assert info.value.reason == reason
    assert q.remaining(1) == 0


def test_chunk_that_ended_before_it_arrived_is_refused():
    q = queue(Strategy.naive_async)
    with pytest.raises(ChunkRefusedError) as info:
        q.merge(chunk(0, obs_tick=0, ready_tick=H), now=H)
    assert info.value.reason == "expired"
