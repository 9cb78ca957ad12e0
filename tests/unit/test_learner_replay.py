"""Chunk replay: chunk building, episode boundaries, refusal of bad input, capacity, lag cap, threads."""

from __future__ import annotations

import dataclasses
import gc
import threading

import numpy as np
import pytest
from learner_doubles import episode_batch, image_code

from robotrl.core import keys
from robotrl.core.batch import TransitionBatch
from robotrl.core.columns import COLUMNS
from robotrl.learner.replay import ChunkReplay, ReplayError, ReplaySpec
from robotrl.learner.samples import (
    ACTOR_SAMPLE_KEY,
    DISCOUNT_KEY,
    DONE_KEY,
    NEXT_PREFIX,
    POLICY_MASK_KEY,
    RETURN_TO_GO_KEY,
    REWARD_KEY,
    VERSION_KEY,
)

H = 4
CAMS = {"front": (8, 8, 3), "wrist": (6, 6, 3)}


def make(
    capacity: int = 512, cameras: dict[str, tuple[int, int, int]] | None = None, **kw: float
) -> ChunkReplay:
    spec = ReplaySpec(state_dim=2, action_dim=3, horizon=H, cameras=cameras or {}, gamma=0.9, **kw)  # type: ignore[arg-type]
    return ChunkReplay(spec, capacity)


def check_sample(b: dict, i: int) -> tuple[int, int, int]:
    """Assert sample ``i`` is one consistent executed chunk; return (episode, tick, real actions)."""
    ep, tick = int(b[keys.STATE][i, 0]), int(b[keys.STATE][i, 1])
    mask = b[keys.ACTION_MASK][i]
    m = int(mask.sum())
    assert m >= 1 and mask[:m].all() and not mask[m:].any()
    acts = b[keys.ACTION][i]
    assert (acts[:m, 0] == ep).all(), "a chunk crossed an episode"
    np.testing.assert_array_equal(acts[:m, 1], tick + np.arange(m))
    # past the episode's end the window repeats its last action, as pretraining pads it
    # (the policy attends to padding rows, so they must look like what it was trained on)
    assert (acts[m:] == acts[m - 1]).all()
    if not b[DONE_KEY][i]:
        assert b[NEXT_PREFIX + keys.STATE][i, 0] == ep
        assert b[NEXT_PREFIX + keys.STATE][i, 1] == tick + m
    for cam in CAMS if keys.IMAGE_PREFIX + "front" in b else ():
        assert (b[keys.IMAGE_PREFIX + cam][i] == image_code(ep, tick)).all(), "torn image"
        if not b[DONE_KEY][i]:
            assert (b[NEXT_PREFIX + keys.IMAGE_PREFIX + cam][i] == image_code(ep, tick + m)).all()
    return ep, tick, m


def test_chunk_never_crosses_an_episode_with_interleaved_actors():
    buf = make()
    rng = np.random.default_rng(0)
    # Two actors, each streaming episodes in pieces; the pieces interleave in the buffer.
    plans = {
        "a": [(1, 9, "terminated"), (2, 6, "truncated")],
        "b": [(10, 11, "truncated"), (11, 3, "terminated")],
    }
    for actor in ("a", "b"):
        for ep, length, end in plans[actor]:
            half = length // 2
            buf.add(episode_batch(actor, ep, range(half)))
            other = "b" if actor == "a" else "a"
            buf.add(episode_batch(other, 99, range(100 + ep, 101 + ep)))  # unrelated, open episode
            buf.add(episode_batch(actor, ep, range(half, length), end=end))
    batch = buf.sample(400, rng)
    seen = {check_sample(batch, i)[:2] for i in range(400)}
    assert {(1, t) for t in range(9)} <= seen
    # Starts whose next state has not arrived (the open episode 99) are never drawn.
    assert all(ep != 99 for ep, _ in seen)


def test_chunk_return_discount_and_done_are_exact():
    buf = make()
    rewards = np.array([0.0, 1.0, 0.0, 0.0, 2.0, 5.0])
    buf.add(episode_batch("a", 1, range(6), end="terminated", rewards=rewards))
    b = buf.sample(300, np.random.default_rng(1))
    for i in range(300):
        _, tick, m = check_sample(b, i)
        expect = sum(0.9**k * rewards[tick + k] for k in range(m))
        assert b[REWARD_KEY][i] == pytest.approx(expect, rel=1e-5)
        assert b[DISCOUNT_KEY][i] == pytest.approx(0.9**m)
        assert m == min(H, 6 - tick)
        assert bool(b[DONE_KEY][i]) == (tick + m == 6)


def test_returns_to_go_are_known_once_the_episode_ends_and_never_for_a_cut_one():
    buf = make()
    rewards = np.array([0.0, 1.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 5.0])
    buf.add(episode_batch("a", 1, range(6), rewards=rewards[:6]))  # open: ticks 0-1 ready
    b = buf.sample(50, np.random.default_rng(3))
    assert np.isnan(b[RETURN_TO_GO_KEY]).all()
    buf.add(episode_batch("a", 1, range(6, 10), end="truncated", rewards=rewards[6:]))
    b = buf.sample(300, np.random.default_rng(4))
    for i in range(300):
        _, tick, _ = check_sample(b, i)
        expect = sum(0.9**k * r for k, r in enumerate(rewards[tick:]))
        assert b[RETURN_TO_GO_KEY][i] == pytest.approx(expect, rel=1e-5)
    # An episode cut by a gap in its ticks never learns its returns: its end is unknown.
    buf.add(episode_batch("b", 2, range(8)))
    buf.add(episode_batch("b", 2, range(10, 14), end="terminated"))
    b = buf.sample(400, np.random.default_rng(5))
    cut = np.array([b[keys.STATE][i, 0] == 2 and b[keys.STATE][i, 1] < 8 for i in range(400)])
    assert cut.any() and np.isnan(b[RETURN_TO_GO_KEY][cut]).all()


def test_truncated_episode_without_next_observation_bootstraps_from_its_last_tick():
    buf = make()
    buf.add(episode_batch("a", 1, range(6), end="truncated", with_next=False))
    b = buf.sample(200, np.random.default_rng(2))
    ticks = set()
    for i in range(200):
        _, tick, m = check_sample(b, i)
        ticks.add(tick)
        assert not b[DONE_KEY][i]
        assert tick + m <= 5
    assert ticks == {0, 1, 2, 3, 4}  # the last tick serves only as a next state


def test_shape_mismatch_is_refused_counted_and_never_written():
    buf = make(cameras=CAMS)
    good = episode_batch("a", 1, range(5), end="terminated", cameras=CAMS)
    buf.add(good)
    before = (len(buf), buf.rows_added)
    bad_state = episode_batch("a", 2, range(5), end="terminated", cameras=CAMS, state_dim=3)
    bad_cam = episode_batch(
        "a", 3, range(5), end="terminated", cameras={"front": (8, 8, 3), "wrist": (7, 6, 3)}
    )
    with pytest.raises(ReplayError, match=r"state has 3 columns, the spec has 2"):
        buf.add(bad_state)
    with pytest.raises(ReplayError, match=r"camera 'wrist'"):
        buf.add(bad_cam)
    assert buf.refused_batches == 2 and buf.refused_rows == 10
    assert (len(buf), buf.rows_added) == before
    b = buf.sample(100, np.random.default_rng(3))
    assert set(b[keys.STATE][:, 0].tolist()) == {1.0}


def test_non_finite_values_are_refused():
    buf = make()
    bad = episode_batch("a", 1, range(5), end="terminated", rewards=[0, 0, np.nan, 0, 0])
    with pytest.raises(ReplayError, match="reward holds NaN"):
        buf.add(bad)
    assert len(buf) == 0


def test_capacity_overwrites_the_oldest_episodes_first():
    buf = make(capacity=64)
    for ep in range(20):
        buf.add(episode_batch("a", ep, range(7), end="terminated"))  # 8 rows each
    b = buf.sample(500, np.random.default_rng(4))
    eps = {check_sample(b, i)[0] for i in range(500)}
    assert eps == set(range(12, 20))
    assert len(buf) == 8 * 7


def test_lag_cap_drops_old_policy_versions_but_keeps_demonstrations():
    buf = make()
    buf.add(episode_batch("a", 1, range(5), end="terminated", version=1))
    buf.add(episode_batch("a", 2, range(5), end="terminated", version=5))
    buf.add(episode_batch("demo", 3, range(5), end="terminated", version=-1))
    b = buf.sample(300, np.random.default_rng(5), min_version=4)
    assert set(b[VERSION_KEY].tolist()) == {5, -1}
    with pytest.raises(LookupError):
        make().sample(1, np.random.default_rng(0))


def test_prefix_len_is_the_recorded_delay_or_drawn_for_demonstrations():
    buf = make(max_delay=2)
    buf.add(episode_batch("a", 1, range(9), end="terminated", delay=3))
    b = buf.sample(300, np.random.default_rng(6))
    m = b[keys.ACTION_MASK].sum(1)
    np.testing.assert_array_equal(b[keys.PREFIX_LEN], np.minimum(3, m - 1))
    demo = make(max_delay=2)
    demo.add(episode_batch("d", 1, range(9), end="terminated", delay=-1))
    d = demo.sample(300, np.random.default_rng(7))
    assert set(d[keys.PREFIX_LEN].tolist()) == {0, 1, 2}


def test_concurrent_ingest_and_sampling_never_return_a_torn_sample():
    """A writer streams episodes into a small ring (constant overwriting) while readers sample."""
    buf = make(capacity=96, cameras=CAMS)
    stop = threading.Event()
    errors: list[BaseException] = []
    checked = [0]

    def reader(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            while not stop.is_set():
                try:
                    b = buf.sample(32, rng)
                except LookupError:
                    continue
                for i in range(32):
                    check_sample(b, i)
                checked[0] += 32
        except BaseException as exc:
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(2)]
    for t in threads:
        t.start()
    try:
        for ep in range(300):
            if stop.is_set():
                break
            length = 3 + ep % 9
            for lo in range(0, length, 2):
                hi = min(lo + 2, length)
                end = ("terminated", "truncated")[ep % 2] if hi == length else None
                buf.add(episode_batch(f"actor-{ep % 3}", ep, range(lo, hi), end=end, cameras=CAMS))
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
    assert not errors, errors[0]
    assert checked[0] > 0
    buf.close()


def test_a_buffer_s_own_folder_goes_with_it_closed_or_dropped(tmp_path):
    """Image files live in a temporary folder; neither close() nor garbage collection may leave it behind."""
    closed = make(cameras=CAMS)
    closed_dir = closed._rows.folder
    closed.add(episode_batch("a", 0, range(3), end="terminated", cameras=CAMS))
    assert any(closed_dir.iterdir())
    closed.close()
    assert not closed_dir.exists()

    dropped = make(cameras=CAMS)
    dropped_dir = dropped._rows.folder
    del dropped
    gc.collect()
    assert not dropped_dir.exists()

    given = ChunkReplay(
        ReplaySpec(state_dim=2, action_dim=3, horizon=H, cameras=CAMS), 64, storage_dir=tmp_path / "mine"
    )
    given.close()
    assert (tmp_path / "mine").exists(), "a folder the caller gave is the caller's"


def test_saved_buffer_restores_rows_samples_and_the_open_episode(tmp_path):
    buf = make(cameras=CAMS)
    buf.add(episode_batch("a", 1, range(9), end="terminated", cameras=CAMS))
    buf.add(episode_batch("a", 2, range(5), cameras=CAMS))  # still open when saved
    buf.save(tmp_path / "online")
    restored = make(cameras=CAMS)
    restored.load(tmp_path / "online")
    a, b = buf.sample(50, np.random.default_rng(8)), restored.sample(50, np.random.default_rng(8))
    for key in a:
        np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]))
    # The episode open at save time continues after the restore, chunks spanning the two parts.
    restored.add(episode_batch("a", 2, range(5, 8), end="terminated", cameras=CAMS))
    s = restored.sample(400, np.random.default_rng(9))
    starts = {check_sample(s, i)[:2] for i in range(400)}
    assert {(2, t) for t in range(8)} <= starts
    # Its rows from before the save learn their returns to go at its end, too.
    assert not np.isnan(s[RETURN_TO_GO_KEY]).any()
    with pytest.raises(ValueError, match="does not match"):
        make(capacity=256, cameras=CAMS).load(tmp_path / "online")
    # Every transition column is saved under its own name; one saved before a column (or a
    # sample array) existed is refused by name, before anything is overwritten.
    for column in COLUMNS:
        assert not column.is_array or (tmp_path / "online" / f"{column.name}.npy").is_file()
    for missing in ("start_chunk.npy", "policy_version.npy"):
        (tmp_path / "online" / missing).unlink()
        fresh = make(cameras=CAMS)
        with pytest.raises(
            ValueError, match=rf"lacks .*{missing.replace('.', '[.]')}.*learner\.resume=false"
        ):
            fresh.load(tmp_path / "online")
        assert len(fresh) == 0


def test_a_saved_buffer_holds_only_the_rows_written_and_a_wrapped_one_restores_whole(tmp_path):
    buf = make(capacity=4096, cameras=CAMS)
    buf.add(episode_batch("a", 1, range(9), end="terminated", cameras=CAMS))
    buf.save(tmp_path / "early")
    # Ten rows (nine ticks and the next observation), not the 4,096 the ring holds.
    assert np.load(tmp_path / "early" / "images-front.npy", mmap_mode="r").shape == (10, 8, 8, 3)
    assert (tmp_path / "early" / "images-front.npy").stat().st_size < 4096
    ring = make(capacity=64, cameras=CAMS)
    for episode in range(12):  # 120 rows through 64: the ring wraps
        ring.add(episode_batch("a", episode, range(9), end="terminated", cameras=CAMS))
    ring.save(tmp_path / "wrapped")
    restored = make(capacity=64, cameras=CAMS)
    restored.add(episode_batch("b", 99, range(30), end="terminated", cameras=CAMS))  # overwritten
    restored.load(tmp_path / "wrapped")
    a, b = ring.sample(200, np.random.default_rng(3)), restored.sample(200, np.random.default_rng(3))
    for key in a:
        np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]))


def chunked_episode(ticks: int, period: int) -> list:
    """An actor's terminated episode whose chunk c is observed at tick ``period * c`` with delay 1
    (the first chunk: 0, the robot waited) and runs until the next one takes over."""
    chunk = np.maximum(0, (np.arange(ticks) - 1) // period)
    return [
        dataclasses.replace(
            t, chunk_id=int(c), index_in_chunk=int(t.tick - period * c), delay_ticks=int(c > 0)
        )
        for t, c in zip(
            episode_batch("a", 1, range(ticks), end="terminated").to_transitions(), chunk, strict=True
        )
    ]


def test_the_actor_learns_from_chunk_starts_with_their_delay_and_from_every_demonstration_window():
    """Chunk c is observed at tick 3c and runs from index 1 (delay 1; the first chunk: 0, the robot
    waited) until the next one: only windows from ticks 0, 3, 6, ... are a plan some policy made
    from that state; the episode arrives in two batches, as the actor streams it."""
    rows = chunked_episode(20, period=3)
    buf = make(max_delay=2)
    buf.add(TransitionBatch.from_transitions(rows[:10]))
    buf.add(TransitionBatch.from_transitions(rows[10:]))
    b = buf.sample(400, np.random.default_rng(0))
    start = b[keys.STATE][:, 1].astype(int)
    np.testing.assert_array_equal(b[ACTOR_SAMPLE_KEY], start % 3 == 0)
    starts = b[ACTOR_SAMPLE_KEY]
    assert starts.any() and not starts.all()
    np.testing.assert_array_equal(b[keys.PREFIX_LEN][starts], np.where(start[starts] == 0, 0, 1))
    demo = make(max_delay=2)
    demo.add(episode_batch("d", 1, range(9), end="terminated", delay=-1))
    assert demo.sample(50, np.random.default_rng(1))[ACTOR_SAMPLE_KEY].all()


def test_the_actor_learns_only_the_rows_its_chunk_start_produced():
    """Chunk c is observed at tick 2c with delay 1 and runs ticks 2c+1 and 2c+2: a 4-row window
    from 2c ends with a row the next chunk planned from a later observation. The actor's mask
    drops it (the committed prefix stays: it is the policy's input); the critic's keeps it."""
    buf = make(max_delay=2)
    buf.add(TransitionBatch.from_transitions(chunked_episode(16, period=2)))
    b = buf.sample(400, np.random.default_rng(0))
    start = b[keys.STATE][:, 1].astype(int)
    starts = b[ACTOR_SAMPLE_KEY] & (start + H <= 16)
    assert starts.any()
    own_rows = np.tile([True, True, True, False], (starts.sum(), 1))
    np.testing.assert_array_equal(b[POLICY_MASK_KEY][starts], own_rows)
    assert b[keys.ACTION_MASK][starts].all()
    # A demonstration window is the expert's throughout.
    demo = make(max_delay=2)
    demo.add(episode_batch("d", 1, range(9), end="terminated", delay=-1))
    d = demo.sample(50, np.random.default_rng(1))
    np.testing.assert_array_equal(d[POLICY_MASK_KEY], d[keys.ACTION_MASK])


def test_a_window_that_starts_on_a_tick_a_person_drove_teaches_the_rows_they_drove():
    """A person drives ticks 5-10 of a chunked episode (period 3): every window starting there is
    the actor's, as a demonstration's is, with a drawn prefix, and teaches only the driven rows;
    policy windows stay at their chunk starts."""
    rows = [dataclasses.replace(t, intervention=5 <= t.tick <= 10) for t in chunked_episode(20, period=3)]
    buf = make(max_delay=2)
    buf.add(TransitionBatch.from_transitions(rows))
    b = buf.sample(600, np.random.default_rng(0))
    start = b[keys.STATE][:, 1].astype(int)
    driven = (start >= 5) & (start <= 10)
    np.testing.assert_array_equal(b[ACTOR_SAMPLE_KEY], driven | (start % 3 == 0))
    window_ticks = start[:, None] + np.arange(H)
    np.testing.assert_array_equal(
        b[POLICY_MASK_KEY][driven], b[keys.ACTION_MASK][driven] & (window_ticks[driven] <= 10)
    )
    assert set(b[keys.PREFIX_LEN][driven].tolist()) == {0, 1, 2}  # drawn from [0, max_delay]


def test_the_policy_s_last_tick_before_a_takeover_pays_the_intervention_penalty():
    """A person takes over at ticks 5 and 12 (the first in a later batch than the tick before it)
    and at tick 0 of another episode: ticks 4 and 11 earn reward - p in every window and return
    to go that holds them; a takeover with no policy tick before it costs nothing."""
    rewards = np.zeros(20)
    rewards[-1] = 1.0
    driven = [5 <= t.tick <= 7 or 12 <= t.tick <= 13 for t in chunked_episode(20, period=3)]
    rows = [
        dataclasses.replace(t, intervention=d, reward=float(r))
        for t, d, r in zip(chunked_episode(20, period=3), driven, rewards, strict=True)
    ]
    buf = make(intervention_penalty=0.5)
    buf.add(TransitionBatch.from_transitions(rows[:5]))
    buf.add(TransitionBatch.from_transitions(rows[5:]))
    expected = rewards.copy()
    expected[[4, 11]] -= 0.5
    b = buf.sample(600, np.random.default_rng(0))
    for i in range(600):
        _, tick, m = check_sample(b, i)
        window = sum(0.9**k * expected[tick + k] for k in range(m))
        assert b[REWARD_KEY][i] == pytest.approx(window, abs=1e-6)
        to_go = sum(0.9**k * r for k, r in enumerate(expected[tick:]))
        assert b[RETURN_TO_GO_KEY][i] == pytest.approx(to_go, abs=1e-6)

    other = make(intervention_penalty=0.5)
    first_driven = [dataclasses.replace(t, intervention=t.tick < 3) for t in chunked_episode(6, period=3)]
    other.add(TransitionBatch.from_transitions(first_driven))
    assert (other.sample(200, np.random.default_rng(1))[REWARD_KEY] == 0.0).all()
