"""Shared-memory weight segments: written once, mapped read-only, checked like pieces, never a path
the publisher did not make."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from robotrl.transport.weight_checks import WeightRefused
from robotrl.transport.weight_segments import SEGMENT_DIR, SegmentWriter, host_id, map_segment, remove_orphans
from robotrl.wire.codec import WireError

pytestmark = pytest.mark.skipif(host_id() is None, reason="no /dev/shm here")

TENSORS = {
    "b": np.arange(5, dtype=np.float32),
    "a.weight": np.arange(12, dtype=np.float64).reshape(3, 4),
    "empty": np.zeros((0, 3), np.float32),
    "steps": np.array([7], np.int64),
}
LAYOUT = {name: (arr.shape, arr.dtype) for name, arr in TENSORS.items()}


def write(writer: SegmentWriter, tensors: dict[str, np.ndarray]):
    segment = writer.open(tensors)
    segment.fill(tensors)
    return segment


@pytest.fixture
def writer():
    w = SegmentWriter()
    yield w
    w.close()


def test_a_segment_maps_back_to_the_same_tensors_read_only(writer):
    segment = write(writer, TENSORS)
    try:
        meta = segment.meta()
        got = map_segment(meta["segment"], meta["tensors"], LAYOUT, 1 << 20, 16)
    finally:
        segment.unlink()
    assert sorted(got) == sorted(TENSORS)
    for name, arr in TENSORS.items():
        np.testing.assert_array_equal(got[name], arr)
        assert got[name].dtype == arr.dtype and got[name].shape == arr.shape
    assert not got["b"].flags.writeable
    assert all(entry[3] % 64 == 0 and entry[3] >= 64 for entry in meta["tensors"])  # aligned for vector loads


def test_the_writer_copies_the_tensors_so_the_caller_may_change_them(writer):
    source = {"w": np.ones(4, np.float32)}
    segment = write(writer, source)
    source["w"][:] = 5.0
    meta = segment.meta()
    try:
        got = map_segment(meta["segment"], meta["tensors"], None, 1 << 20, 16)
    finally:
        segment.unlink()
    assert float(got["w"][0]) == 1.0


def test_each_version_gets_its_own_file_and_close_leaves_none(writer):
    first, second = write(writer, TENSORS), write(writer, TENSORS)
    assert first.path != second.path and first.path.exists() and second.path.exists()
    first.unlink()
    second.unlink()
    writer.close()
    assert not list(SEGMENT_DIR.glob(f"robotrl-weights-{os.getpid()}-*"))


def test_nan_wrong_shape_and_oversized_segments_are_refused(writer):
    nan = {"w": np.array([1.0, np.nan], np.float32)}
    segment = write(writer, nan)
    meta = segment.meta()
    try:
        with pytest.raises(WeightRefused, match="non_finite"):
            map_segment(meta["segment"], meta["tensors"], None, 1 << 20, 16)
        with pytest.raises(WeightRefused, match="shape"):
            map_segment(meta["segment"], meta["tensors"], {"w": ((3,), np.dtype(np.float32))}, 1 << 20, 16)
    finally:
        segment.unlink()
    big = write(writer, {"w": np.ones(1000, np.float32)})
    meta = big.meta()
    try:
        with pytest.raises(WeightRefused, match="oversized"):
            map_segment(meta["segment"], meta["tensors"], None, 3000, 16)
    finally:
        big.unlink()


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
        map_segment(path, [["w", "float32", [1], 0]], None, 1 << 20, 16)


@pytest.mark.parametrize(
    "tensors",
    [
        [["w", "float32", [4], 0], ["v", "float32", [4], 0]],  # overlapping
        [["w", "float32", [1 << 20], 0]],  # past the end
        [["w", "object", [4], 0]],  # a dtype the wire never carries
        [["w", "float32", [4], 3]],  # misaligned
        [["w", "float32", [-1], 0]],
        "w",
        [],
    ],
)
def test_a_malformed_announcement_is_refused_before_anything_is_read(writer, tensors):
    segment = write(writer, {"w": np.ones(4, np.float32), "v": np.ones(4, np.float32)})
    try:
        with pytest.raises(WireError):
            map_segment(str(segment.path), tensors, None, 1 << 20, 16)
    finally:
        segment.unlink()


def test_a_segment_gone_is_an_os_error_for_the_caller_to_fall_back_on(writer):
    segment = write(writer, TENSORS)
    meta = segment.meta()
    segment.unlink()
    with pytest.raises(FileNotFoundError):
        map_segment(meta["segment"], meta["tensors"], LAYOUT, 1 << 20, 16)


def test_segments_of_a_killed_publisher_are_removed_and_a_living_ones_kept():
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
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


def test_a_subscriber_checks_each_tensor_as_the_publisher_writes_it(writer):
    tensors = {f"t{i}": np.full(1000, float(i), np.float32) for i in range(8)}
    segment = writer.open(tensors)
    meta = segment.meta()
    got: dict[str, dict[str, np.ndarray]] = {}
    reader = threading.Thread(
        target=lambda: got.setdefault(
            "tensors", map_segment(meta["segment"], meta["tensors"], None, 1 << 20, 16)
        )
    )
    try:
        reader.start()  # mapped before a single tensor is written: it waits on the header's count
        segment.fill(tensors)
        reader.join(10)
    finally:
        segment.unlink()
    assert not reader.is_alive()
    for name, arr in tensors.items():
        np.testing.assert_array_equal(got["tensors"][name], arr)


def test_a_segment_never_finished_or_abandoned_is_refused_as_partial(writer):
    tensors = {"a": np.ones(4, np.float32), "b": np.ones(4, np.float32)}
    segment = writer.open(tensors)
    meta = segment.meta()
    try:
        with pytest.raises(WeightRefused, match=r"partial.*'a' was never written"):
            map_segment(meta["segment"], meta["tensors"], None, 1 << 20, 16, wait_s=0.0)
        with pytest.raises(TypeError):
            segment.fill({"a": np.ones(4, np.float32), "b": "not an array"})  # the learner's own error...
        with pytest.raises(WeightRefused, match=r"partial.*'b' was never written"):  # ...refused at once
            map_segment(meta["segment"], meta["tensors"], None, 1 << 20, 16, wait_s=3600.0)
    finally:
        segment.unlink()
