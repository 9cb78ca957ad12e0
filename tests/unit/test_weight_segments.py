"""Shared-memory weight segments: mapped read-only, checked like pieces as they are written, never
rewritten while a subscriber may use them, never a path the publisher did not make."""

from __future__ import annotations

import errno
import gc
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from waiting import wait_until

from robotrl.transport.weight_checks import WeightRefused
from robotrl.transport.weight_segments import (
    SEGMENT_DIR,
    SegmentLeases,
    SegmentPool,
    host_id,
    open_segment,
    read_segment,
    remove_orphans,
)
from robotrl.wire.codec import WireError

pytestmark = pytest.mark.skipif(host_id() is None, reason="no /dev/shm here")

TENSORS = {
    "b": np.arange(5, dtype=np.float32),
    "a.weight": np.arange(12, dtype=np.float64).reshape(3, 4),
    "empty": np.zeros((0, 3), np.float32),
    "steps": np.array([7], np.int64),
}
LAYOUT = {name: (arr.shape, arr.dtype) for name, arr in TENSORS.items()}
ACTOR = b"actor-route"


@pytest.fixture
def pool():
    segments = SegmentPool()
    yield segments
    segments.close()


def offer(pool: SegmentPool, version: int, tensors: dict[str, np.ndarray]):
    """A segment for ``version`` as the publisher gets one: an idle one, else a fresh one."""
    segment = pool.reuse(version, tensors)
    if segment is None:
        made = pool.fresh(tensors)
        segment = pool.adopt(made, version, tensors) if made is not None else None
    assert segment is not None
    return segment


def write(pool: SegmentPool, version: int, tensors: dict[str, np.ndarray]):
    segment = offer(pool, version, tensors)
    segment.fill(tensors)
    return segment


def read(meta: dict, expected=None, max_bytes: int = 1 << 20, **kwargs):
    return read_segment(open_segment(meta["segment"], max_bytes), meta["tensors"], expected, 16, **kwargs)


def test_a_segment_maps_back_to_the_same_tensors_read_only(pool):
    meta = write(pool, 1, TENSORS).meta()
    got = read(meta, LAYOUT)
    assert sorted(got) == sorted(TENSORS)
    for name, arr in TENSORS.items():
        np.testing.assert_array_equal(got[name], arr)
        assert got[name].dtype == arr.dtype and got[name].shape == arr.shape
    assert not got["b"].flags.writeable
    assert all(entry[3] % 64 == 0 and entry[3] >= 64 for entry in meta["tensors"])  # after the header


def test_the_pool_copies_the_tensors_so_the_caller_may_change_them(pool):
    source = {"w": np.ones(4, np.float32)}
    meta = write(pool, 1, source).meta()
    source["w"][:] = 5.0
    assert float(read(meta)["w"][0]) == 1.0


def test_a_segment_is_written_again_only_once_every_subscriber_told_of_it_let_go(pool):
    first = write(pool, 1, TENSORS)
    first.lessees[ACTOR] = 1  # announcement 1 sent to the actor
    second = write(pool, 2, TENSORS)
    pool.withdraw(first)  # version 2 supersedes it
    assert second is not first
    pool.release(ACTOR, seen=0, holding=[])  # a want from before announcement 1 was dealt with
    third = write(pool, 3, TENSORS)
    pool.withdraw(second)
    assert third is not first
    pool.release(ACTOR, seen=1, holding=[str(first.path)])  # its views are still the weights
    assert write(pool, 4, TENSORS) is second  # idle: withdrawn, never leased
    pool.withdraw(third)
    pool.release(ACTOR, seen=1, holding=[])
    again = write(pool, 5, TENSORS)
    assert again is first and again.version == 5


def test_a_version_still_offered_is_never_overwritten(pool):
    latest = write(pool, 1, TENSORS)  # not withdrawn: pending or latest, to be announced
    assert write(pool, 2, TENSORS) is not latest


def test_a_refused_version_lets_its_segment_go_all_the_same(pool):
    refused = write(pool, 1, {"w": np.array([np.nan], np.float32)})
    refused.lessees[ACTOR] = 1
    write(pool, 2, {"w": np.ones(1, np.float32)})
    pool.withdraw(refused)
    pool.release(ACTOR, seen=1, holding=[])  # dealt with: refused, so never held
    assert write(pool, 3, {"w": np.ones(1, np.float32)}) is refused


def test_a_forgotten_subscribers_segments_are_retired_never_written_again(pool):
    held = write(pool, 1, TENSORS)
    held.lessees[ACTOR] = 1
    got = read(held.meta())  # the silent subscriber's weights
    pool.forget(ACTOR)
    assert held.path.exists()  # still offered: a subscriber joining now is told of it
    assert write(pool, 2, TENSORS) is not held
    pool.withdraw(held)
    assert write(pool, 3, TENSORS) is not held
    for _ in range(100):  # unlinked on a background thread once withdrawn
        if not held.path.exists():
            break
        threading.Event().wait(0.05)
    assert not held.path.exists()
    np.testing.assert_array_equal(got["b"], TENSORS["b"])  # its mapping keeps the memory


def test_a_full_shm_is_an_os_error_and_no_segment_not_a_crash(pool, monkeypatch):
    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    before = set(SEGMENT_DIR.glob(f"robotrl-weights-{os.getpid()}-*"))  # other tests' pools' files
    assert pool.reuse(1, TENSORS) is None and pool.fresh(TENSORS) is None
    pool.close()  # after the spare maker reuse started, which fails too (it lay mid-failure once, under load)
    assert set(SEGMENT_DIR.glob(f"robotrl-weights-{os.getpid()}-*")) <= before  # none left behind


def test_close_leaves_no_file(pool):
    before = set(SEGMENT_DIR.glob(f"robotrl-weights-{os.getpid()}-*"))  # other tests' pools' files
    write(pool, 1, TENSORS)
    write(pool, 2, TENSORS).lessees[ACTOR] = 1
    pool.close()
    assert set(SEGMENT_DIR.glob(f"robotrl-weights-{os.getpid()}-*")) <= before


def test_leases_hold_a_segment_while_its_views_live_and_say_when_they_are_gone(pool):
    released = threading.Event()
    leases = SegmentLeases(released.set)
    meta = write(pool, 1, TENSORS).meta()
    tensors = read_segment(leases.mapping(meta["segment"], 1 << 20), meta["tensors"], None, 16)
    leases.lend(meta["segment"], tensors)
    assert leases.holding() == [meta["segment"]]
    assert leases.mapping(meta["segment"], 1 << 20) is leases.mapping(meta["segment"], 1 << 20)  # kept
    del tensors
    gc.collect()
    assert released.is_set() and leases.holding() == []


def test_nan_wrong_shape_and_oversized_segments_are_refused(pool):
    meta = write(pool, 1, {"w": np.array([1.0, np.nan], np.float32)}).meta()
    with pytest.raises(WeightRefused, match="non_finite"):
        read(meta)
    with pytest.raises(WeightRefused, match="shape"):
        read(meta, {"w": ((3,), np.dtype(np.float32))})
    big = write(pool, 2, {"w": np.ones(1000, np.float32)}).meta()
    with pytest.raises(WeightRefused, match="oversized"):
        read(big, max_bytes=3000)


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "/dev/shm/../etc/passwd",
        "/dev/shm/other-file",
        "/tmp/robotrl-weights-1-0123456789abcdef",
        3,
    ],
)
def test_only_a_weight_segment_is_ever_opened(path):
    with pytest.raises(WireError, match="not a weight segment"):
        open_segment(path, 1 << 20)


@pytest.mark.parametrize(
    "tensors",
    [
        [["w", "float32", [4], 64], ["v", "float32", [4], 64]],  # overlapping
        [["v", "float32", [4], 128], ["w", "float32", [4], 64]],  # not in the order written
        [["w", "float32", [1 << 20], 64]],  # past the end
        [["w", "object", [4], 64]],  # a dtype the wire never carries
        [["w", "float32", [4], 65]],  # misaligned
        [["w", "float32", [4], 0]],  # over the header
        [["w", "float32", [-1], 64]],
        "w",
        [],
    ],
)
def test_a_malformed_announcement_is_refused_before_anything_is_read(pool, tensors):
    segment = write(pool, 1, {"w": np.ones(4, np.float32), "v": np.ones(4, np.float32)})
    with pytest.raises(WireError):
        read_segment(open_segment(str(segment.path), 1 << 20), tensors, None, 16, wait_s=0.0)


def test_a_segment_gone_is_an_os_error_for_the_caller_to_fall_back_on(pool):
    segment = write(pool, 1, TENSORS)
    segment.unlink()
    with pytest.raises(FileNotFoundError):
        open_segment(str(segment.path), 1 << 20)


def test_a_subscriber_mapping_a_segment_being_written_waits_for_each_tensor(pool):
    tensors = {f"t{i}": np.full(1000, float(i), np.float32) for i in range(8)}
    segment = offer(pool, 1, tensors)
    meta = segment.meta()
    got: dict[str, dict[str, np.ndarray]] = {}
    reader = threading.Thread(target=lambda: got.setdefault("tensors", read(meta)))
    reader.start()  # mapped before a single tensor is written: it waits on the header's count
    segment.fill(tensors)
    reader.join(10)
    assert not reader.is_alive()
    for name, arr in tensors.items():
        np.testing.assert_array_equal(got["tensors"][name], arr)


def test_a_segment_never_finished_or_abandoned_is_refused_as_partial(pool):
    tensors = {"a": np.ones(4, np.float32), "b": np.ones(4, np.float32)}
    segment = offer(pool, 1, tensors)
    meta = segment.meta()
    with pytest.raises(WeightRefused, match=r"partial.*'a' was never written"):
        read(meta, wait_s=0.0)
    with pytest.raises(TypeError):
        segment.fill({"a": np.ones(4, np.float32), "b": "not an array"})  # the learner's own error...
    with pytest.raises(WeightRefused, match=r"partial.*'b' was never written"):  # ...refused at once
        read(meta, wait_s=3600.0)


def test_segments_of_a_killed_publisher_are_removed_and_a_living_ones_kept():
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    orphan = SEGMENT_DIR / f"robotrl-weights-{int(dead.stdout)}-0123456789abcdef"
    living = SEGMENT_DIR / f"robotrl-weights-{os.getpid()}-0123456789abcdef"
    orphan.write_bytes(b"x")
    living.write_bytes(b"x")
    try:
        assert remove_orphans() >= 1
        assert not orphan.exists() and living.exists()
    finally:
        orphan.unlink(missing_ok=True)
        living.unlink(missing_ok=True)


def test_a_segment_announced_again_is_released_only_by_a_want_that_dealt_with_the_new_announcement(pool):
    segment = write(pool, 1, TENSORS)
    segment.lessees[ACTOR] = 5  # announced again (a restart): announcement number 5
    pool.withdraw(segment)
    pool.release(ACTOR, seen=4, holding=[])  # built before announcement 5 was read: still leased
    assert ACTOR in segment.lessees and not segment.idle()
    pool.release(ACTOR, seen=5, holding=[])
    assert segment.idle()


def test_spares_are_made_in_the_background_so_a_publication_needs_no_fresh_file(pool):
    first = write(pool, 1, TENSORS)  # none idle: made at once; two spares follow
    pool.withdraw(first)
    first.lessees[ACTOR] = 1  # still the actor's weights
    spares: list = []
    wait_until(lambda: spares.append(pool.reuse(2, TENSORS)) or spares[-1] is not None, 10, "a spare")
    assert spares[-1] is not first
