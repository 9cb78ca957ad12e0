"""The wire codec: lossless round trips, and one exception type for every bad input."""

from __future__ import annotations

import math

import msgpack
import numpy as np
import pytest
import zmq
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from robotrl.wire.codec import (
    ALLOWED_DTYPES,
    REASONS,
    SCHEMA_VERSION,
    Message,
    WireError,
    WireLimits,
    decode,
    encode,
)

DTYPES = [np.dtype(name) for name in ALLOWED_DTYPES]


def header(**overrides: object) -> bytes:
    base: dict[str, object] = {
        "v": SCHEMA_VERSION,
        "kind": "k",
        "sender": "s",
        "seq": 0,
        "meta": {},
        "arrays": [],
    }
    base.update(overrides)
    return msgpack.packb(base, use_bin_type=True)


def reason_of(frames: list[object], **kwargs: object) -> str:
    with pytest.raises(WireError) as info:
        decode(frames, **kwargs)  # type: ignore[arg-type]
    assert info.value.reason in REASONS
    return info.value.reason


arrays_strategy = st.dictionaries(
    keys=st.text(min_size=1, max_size=12),
    values=st.sampled_from(DTYPES).flatmap(
        lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=6))
    ),
    max_size=6,
)
meta_strategy = st.dictionaries(
    st.text(max_size=8),
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats() | st.text(max_size=10),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
        max_leaves=8,
    ),
    max_size=4,
)


@given(arrays=arrays_strategy, meta=meta_strategy, seq=st.integers(0, 2**63 - 1))
def test_round_trip_preserves_every_array_and_field(arrays, meta, seq):
    msg = Message("transitions", "actor-7", seq, arrays, meta)
    out = decode(encode(msg))
    assert (out.kind, out.sender, out.seq) == ("transitions", "actor-7", seq)
    assert out.meta == meta or _nan_equal(out.meta, meta)
    assert list(out.arrays) == list(arrays)
    for name, arr in arrays.items():
        got = out.arrays[name]
        assert got.dtype == arr.dtype and got.shape == arr.shape
        np.testing.assert_array_equal(got, arr)
        assert not got.flags.writeable


def _nan_equal(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_nan_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_nan_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_big_array_round_trips_without_copy_on_decode():
    big = np.arange(8_000_000, dtype=np.float32).reshape(2000, 4000)
    frames = encode(Message("weights", "learner", 3, {"w": big}))
    buf = bytearray(frames[1])
    out = decode([frames[0], buf])
    np.testing.assert_array_equal(out.arrays["w"], big)
    assert np.shares_memory(out.arrays["w"], np.frombuffer(buf, np.uint8))


def test_encode_does_not_copy_contiguous_arrays():
    a = np.ones((64, 96, 96, 3), dtype=np.uint8)
    frames = encode(Message("k", "s", 0, {"img": a}))
    assert np.shares_memory(np.asarray(frames[1]), a)


def test_non_contiguous_and_big_endian_arrays_encode_to_equal_values():
    strided = np.arange(24, dtype=np.int64).reshape(4, 6)[:, ::2]
    big_endian = np.arange(5, dtype=">f4")
    out = decode(encode(Message("k", "s", 0, {"a": strided, "b": big_endian})))
    np.testing.assert_array_equal(out.arrays["a"], strided)
    np.testing.assert_array_equal(out.arrays["b"], big_endian)
    assert out.arrays["b"].dtype == np.dtype("<f4")


def test_decode_accepts_zmq_frames():
    a = np.arange(10, dtype=np.int32)
    frames = [zmq.Frame(bytes(f)) for f in encode(Message("k", "s", 1, {"a": a}))]
    np.testing.assert_array_equal(decode(frames).arrays["a"], a)


@pytest.mark.parametrize("dtype", ["object", "<U4", "V8", "datetime64[s]", "complex64"])
def test_encode_refuses_dtypes_the_wire_does_not_carry(dtype):
    arr = np.zeros(2, dtype=dtype)
    with pytest.raises(WireError) as info:
        encode(Message("k", "s", 0, {"a": arr}))
    assert info.value.reason == "encode"


def test_encode_refuses_meta_that_is_not_msgpack():
    with pytest.raises(WireError) as info:
        encode(Message("k", "s", 0, {}, {"x": object()}))
    assert info.value.reason == "encode"


def test_no_frames_and_too_many_frames_are_refused():
    assert reason_of([]) == "frame_count"
    assert reason_of([header()] + [b""] * 300) == "frame_count"


def test_frame_count_must_match_declared_arrays():
    frames = encode(Message("k", "s", 0, {"a": np.zeros(3, np.float32), "b": np.zeros(2, np.int8)}))
    assert reason_of(frames[:-1]) == "frame_count"
    assert reason_of([*frames, b"extra"]) == "frame_count"


def test_truncated_and_overlong_frames_are_refused():
    frames = encode(Message("k", "s", 0, {"a": np.zeros(10, np.float64)}))
    assert reason_of([frames[0], bytes(frames[1])[:-1]]) == "truncated"
    assert reason_of([frames[0], bytes(frames[1]) + b"\0"]) == "size_mismatch"


def test_truncated_header_is_refused():
    frames = encode(Message("k", "s", 0, {"a": np.zeros(1)}))
    assert reason_of([bytes(frames[0])[:-3], frames[1]]) == "header"


def test_lying_header_with_huge_shape_is_refused_before_allocating():
    lying = header(arrays=[["a", "float64", [2**40, 2**40]]])
    assert reason_of([lying, b"\0" * 8]) == "oversized"


def test_declared_total_over_limit_is_refused():
    limits = WireLimits(max_total_bytes=100)
    frames = encode(Message("k", "s", 0, {"a": np.zeros(200, np.uint8)}))
    assert reason_of(frames, limits=limits) == "oversized"


def test_oversized_header_is_refused():
    limits = WireLimits(max_header_bytes=64)
    assert reason_of([header(meta={"x": "y" * 100})], limits=limits) == "oversized"


def test_unknown_schema_version_is_refused():
    assert reason_of([header(v=SCHEMA_VERSION + 1)]) == "schema_version"
    assert reason_of([header(v=True)]) == "schema_version"


@pytest.mark.parametrize("dtype", ["object", "O", "<U4", "V8", "float128", "|S3", "", "float32\0"])
def test_disallowed_dtype_is_refused(dtype):
    assert reason_of([header(arrays=[["a", dtype, [1]]]), b"\0" * 8]) == "dtype"


@pytest.mark.parametrize(
    "shape",
    [[-1], [1.5], ["3"], [True], None, 3, [1] * 9],
)
def test_malformed_shape_is_refused(shape):
    assert reason_of([header(arrays=[["a", "uint8", shape]]), b"\0"]) == "shape"


@pytest.mark.parametrize(
    "bad",
    [
        {"kind": ""},
        {"kind": 3},
        {"sender": None},
        {"seq": -1},
        {"seq": 2**64 - 1},
        {"seq": "1"},
        {"meta": []},
        {"arrays": {}},
        {"extra": 1},
    ],
)
def test_malformed_header_fields_are_refused(bad):
    assert reason_of([header(**bad)]) == "header"


def test_header_that_is_not_a_map_or_not_msgpack_is_refused():
    assert reason_of([msgpack.packb([1, 2, 3])]) == "header"
    assert reason_of([b"\xc1"]) == "header"  # a byte msgpack never uses
    assert reason_of([msgpack.packb(msgpack.ExtType(1, b"x"))]) == "header"


def test_deeply_nested_meta_is_refused_not_crashing():
    nested = b"\x91" * 100_000 + b"\xc0"  # 100k nested one-element arrays
    assert reason_of([nested]) == "header"


def test_duplicate_array_names_are_refused():
    h = header(arrays=[["a", "uint8", [1]], ["a", "uint8", [1]]])
    assert reason_of([h, b"\0", b"\0"]) == "header"


def test_bool_arrays_hold_only_zero_or_one():
    assert reason_of([header(arrays=[["a", "bool", [2]]]), b"\x01\x07"]) == "dtype"


def test_non_finite_values_are_refused_only_where_required():
    frames = encode(Message("k", "s", 0, {"x": np.array([1.0, np.nan]), "y": np.array([np.inf])}))
    assert decode(frames).arrays["x"].shape == (2,)
    assert reason_of(frames, require_finite=True) == "non_finite"
    assert reason_of(frames, require_finite=["y"]) == "non_finite"
    frames_ok = encode(Message("k", "s", 0, {"x": np.array([1.0]), "y": np.array([np.nan])}))
    assert decode(frames_ok, require_finite=["x"]).arrays["x"][0] == 1.0


@given(st.lists(st.binary(max_size=200), min_size=1, max_size=5))
def test_random_bytes_raise_only_wire_error(frames):
    try:
        decode(frames)
    except WireError as exc:
        assert exc.reason in REASONS  # noqa: PT017 - any other exception type fails the test


@given(st.binary(max_size=300), st.integers(0, 60))
def test_corrupted_valid_message_raises_only_wire_error(noise, position):
    frames = [bytes(f) for f in encode(Message("k", "s", 5, {"a": np.arange(6, dtype=np.int16)}, {"m": 1}))]
    h = bytearray(frames[0])
    pos = position % len(h)
    h[pos : pos + len(noise)] = noise
    try:
        out = decode([bytes(h), frames[1]])
    except WireError as exc:
        assert exc.reason in REASONS  # noqa: PT017 - any other exception type fails the test
    else:
        assert isinstance(out, Message)
