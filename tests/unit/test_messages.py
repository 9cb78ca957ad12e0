"""Typed messages: transition batches and weight updates survive the wire exactly, or are refused."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from robotrl.bench.codec import make_transitions
from robotrl.core.batch import TransitionBatch
from robotrl.core.columns import COLUMNS, Shape
from robotrl.core.types import WeightUpdate, weights_digest
from robotrl.wire.codec import Message, WireError, decode, encode
from robotrl.wire.messages import (
    joined_batches_to_message,
    message_to_transition_batch,
    message_to_weight_update,
    packed_non_finite,
    transition_batch_to_message,
    weight_update_to_message,
)
from robotrl.wire.packed_columns import FIELD_DTYPES, PackedDims, _all_finite, layout


def over_the_wire(message: Message) -> Message:
    return decode([bytes(f) for f in encode(message)])


@pytest.mark.parametrize("cameras", [(), ("front", "wrist")])
def test_transitions_survive_the_wire_field_for_field(cameras):
    sent = make_transitions(10, cameras, np.random.default_rng(1))
    batch = TransitionBatch.from_transitions(sent)
    received = message_to_transition_batch(over_the_wire(transition_batch_to_message(batch, seq=42)))
    got = received.to_transitions()
    assert len(got) == len(sent)
    for a, b in zip(sent, got, strict=True):
        assert a.actor_id == b.actor_id
        for column in COLUMNS:
            want, have = column.of(a), column.of(b)
            if column.shape is Shape.IMAGE:
                assert set(want) == set(have) == set(cameras)
                for cam in cameras:
                    np.testing.assert_array_equal(want[cam], have[cam])
            else:
                np.testing.assert_array_equal(want, have, err_msg=column.name)
        assert (a.next_observation is None) == (b.next_observation is None)
        if a.next_observation is not None and b.next_observation is not None:
            assert a.next_observation.tick == b.next_observation.tick
            np.testing.assert_array_equal(a.next_observation.state, b.next_observation.state)


def test_batch_refuses_mixed_actors_and_mismatched_ticks():
    sent = make_transitions(3, (), np.random.default_rng(0))
    from dataclasses import replace

    with pytest.raises(ValueError, match="one batch is one actor"):
        TransitionBatch.from_transitions([sent[0], replace(sent[1], actor_id="other")])
    with pytest.raises(ValueError, match="observation of tick"):
        TransitionBatch.from_transitions([replace(sent[0], tick=99)])
    with pytest.raises(ValueError, match="zero transitions"):
        TransitionBatch.from_transitions([])


def _small_batch() -> TransitionBatch:
    return TransitionBatch.from_transitions(make_transitions(4, ("front",), np.random.default_rng(2)))


def _unpacked_message(**replace_arrays: np.ndarray) -> Message:
    """A batch in the one-frame-per-array form builds before the packed columns wrote (an actor's
    spool or a learner's journal may still hold some), with arrays replaced or removed (None)."""
    batch = _small_batch()
    packed = transition_batch_to_message(batch, seq=0)
    arrays = {name: a for name, a in packed.arrays.items() if name != "columns"}
    arrays.update({name: getattr(batch, name) for name in FIELD_DTYPES})
    for name, value in replace_arrays.items():
        if value is None:
            del arrays[name]
        else:
            arrays[name] = value
    meta = {"instructions": packed.meta["instructions"]}
    return over_the_wire(Message(packed.kind, packed.sender, packed.seq, arrays, meta))


def _packed_message(batch: TransitionBatch | None = None, **fields: object) -> Message:
    """``batch`` on the wire, its packed fields then overwritten in place with ``fields``'
    values (what a buggy or hostile peer could send; the sender itself checks the batch)."""
    message = transition_batch_to_message(batch or _small_batch(), seq=0)
    frame = message.arrays["columns"].copy()
    views = layout(PackedDims.parse(message.meta["dims"])).unpack(frame)  # writable: views of the copy
    for name, value in fields.items():
        views[name][...] = value
    return over_the_wire(
        Message(message.kind, message.sender, 0, {**message.arrays, "columns": frame}, message.meta)
    )


def _reason(message: Message) -> str:
    with pytest.raises(WireError) as info:
        message_to_transition_batch(message)
    return info.value.reason


def _with(message: Message, arrays: dict[str, np.ndarray] | None = None, **meta: object) -> Message:
    return over_the_wire(
        Message(message.kind, message.sender, message.seq, arrays or message.arrays, {**message.meta, **meta})
    )


def test_the_plain_columns_travel_as_one_frame():
    message = transition_batch_to_message(_small_batch(), seq=0)
    assert sorted(message.arrays) == ["columns", "img/front", "next_img/front"]
    assert message.meta["dims"] == [4, 1, 224, 6]


def test_a_packed_batch_with_wrong_dims_or_length_is_refused():
    good = _packed_message()
    for dims in (None, [4, 1, 224], [4, 1, 224, -6], [4, 1, 224, True], [4, 1, 224, 2**40], "4,1,224,6"):
        assert _reason(_with(good, dims=dims)) == "schema", dims
    assert _reason(_with(good, dims=[4, 1, 223, 6])) == "schema"  # another layout: another length
    # Dims of terabytes with a frame of bytes: refused by the length, nothing allocated for them.
    for dims in ([2**31 - 1, 1, 2**31 - 1, 6], [2**20, 0, 2**20, 0], [2**31 - 1] * 4):
        assert _reason(_with(good, dims=dims)) == "schema", dims
    cut = {**good.arrays, "columns": good.arrays["columns"][:-1]}
    assert _reason(_with(good, cut)) == "schema"
    as_floats = {**good.arrays, "columns": good.arrays["columns"].view(np.float32)}
    assert _reason(_with(good, as_floats)) == "schema"
    assert _reason(_with(good, {**good.arrays, "reward": np.zeros(4, np.float32)})) == "schema"


@pytest.mark.parametrize("dims", [(4, 1, 224, 6), (0, 0, 3, 2), (9, 3, 1, 1), (2, 2, 0, 7)])
def test_a_layout_cuts_every_field_to_the_shape_the_batch_requires(dims):
    """The received batch skips the shape check (``of_shaped_columns``): the layout's views must
    pass it. ``next_rows`` and the indices are set valid; the other bytes are zeros."""
    packed = layout(PackedDims(*dims))
    columns = packed.unpack(np.zeros(packed.nbytes, np.uint8))
    columns["next_rows"] = np.arange(dims[0] - dims[1], dims[0], dtype=np.int64)
    # The checked constructor raises ValueError naming any field the layout cut wrongly.
    TransitionBatch(actor_id="a", images={}, next_images={}, instructions=("",), **columns)
    trusted = TransitionBatch.of_shaped_columns("a", columns, {}, {}, ("",))
    assert all(getattr(trusted, k) is v for k, v in columns.items())


def test_a_packed_batch_with_nan_or_bad_indices_or_bool_bytes_is_refused():
    with pytest.raises(WireError, match="state"):
        message_to_transition_batch(_packed_message(state=np.nan))
    assert _reason(_packed_message(action=np.inf)) == "non_finite"
    assert _reason(_packed_message(next_state=-np.inf)) == "non_finite"
    assert _reason(_packed_message(instruction_index=9)) == "schema"
    assert _reason(_packed_message(instruction_index=-1)) == "schema"
    assert _reason(_packed_message(next_rows=7)) == "schema"
    message = _packed_message()
    bools = next(s for s in layout(PackedDims.parse(message.meta["dims"])).sections if s.dtype.kind == "b")
    for where in (bools.span.start, bools.span.stop - 1):
        frame = message.arrays["columns"].copy()
        frame[where] = 2
        assert _reason(_with(message, {**message.arrays, "columns": frame})) == "dtype"


@pytest.mark.parametrize(
    "index",
    [
        np.full(4, -1, np.int32),
        np.full(4, -(2**31), np.int32),
        np.full(4, 2, np.int64),
        np.array([0, 1, -1, 0], np.int16),
        np.array([0, 1, 1, 2], np.uint8),
        np.zeros(4),
    ],
)
def test_a_batch_whose_instruction_indices_are_negative_past_the_end_or_not_integers_is_refused(index):
    with pytest.raises(ValueError, match="instruction_index"):
        dataclasses.replace(_small_batch(), instruction_index=index)


def test_narrow_or_byte_swapped_instruction_indices_are_bounded_by_their_values():
    many = tuple(f"task {i}" for i in range(300))  # an int8 -1 read as a byte would be 255: inside
    with pytest.raises(ValueError, match="instruction_index"):
        dataclasses.replace(_small_batch(), instructions=many, instruction_index=np.full(4, -1, np.int8))
    swapped = np.array([0, 1, 1, 0], ">i4")  # read as native bytes, 1 would be 16,777,216
    assert dataclasses.replace(_small_batch(), instruction_index=swapped).instruction_index.tolist() == [
        0,
        1,
        1,
        0,
    ]
    with pytest.raises(ValueError, match="instruction_index"):
        dataclasses.replace(_small_batch(), instruction_index=np.array([0, 2, 0, 0], ">i8"))


def test_a_packed_message_names_its_fields_that_are_not_finite():
    batch = _small_batch()
    reward, next_state = batch.reward.copy(), batch.next_state.copy()
    reward[1], next_state[0, 3] = np.nan, -np.inf
    bad = dataclasses.replace(batch, reward=reward, next_state=next_state)
    assert sorted(packed_non_finite(transition_batch_to_message(bad, 0))) == ["next_state", "reward"]
    assert packed_non_finite(joined_batches_to_message([batch, bad], 0)) == ["reward", "next_state"]
    assert packed_non_finite(joined_batches_to_message([batch, batch], 0)) == []


def test_the_finiteness_check_finds_nan_and_infinity_anywhere_and_is_not_fooled_by_large_values():
    """The packed check is a dot product with zeros: every position of a vector kernel's body and
    tail, and finite values whose sum would overflow; its shared zeros grown and read shorter."""
    for size in (1001, 1, 7, 8, 9, 33, 70, 1001, 2500):
        assert _all_finite(np.full(size, 3e38, np.float32))
        for position in range(size):
            for value in (np.nan, np.inf, -np.inf):
                values = np.full(size, 3e38, np.float32)
                values[position] = value
                assert not _all_finite(values), (size, position, value)


def test_batches_join_in_order_with_their_instructions_and_next_observations():
    one = TransitionBatch.from_transitions(make_transitions(3, ("front",), np.random.default_rng(4)))
    two = dataclasses.replace(_small_batch(), instructions=("other", "pick the cube"))
    joined = message_to_transition_batch(over_the_wire(joined_batches_to_message([one, two, one], 0)))
    assert len(joined) == 3 + 4 + 3
    np.testing.assert_array_equal(joined.state, np.concatenate([one.state, two.state, one.state]))
    np.testing.assert_array_equal(joined.next_rows, [2, 6, 9])
    np.testing.assert_array_equal(
        joined.next_state, np.concatenate([one.next_state, two.next_state, one.next_state])
    )
    rows = joined.to_transitions()
    want = [*one.to_transitions(), *two.to_transitions(), *one.to_transitions()]
    assert [t.observation.instruction for t in rows] == [t.observation.instruction for t in want]
    np.testing.assert_array_equal(joined.images["front"][3:7], two.images["front"])
    with pytest.raises(WireError, match="one actor"):
        joined_batches_to_message([one, dataclasses.replace(one, actor_id="other")], 0)


def test_packing_casts_within_a_kind_and_refuses_across_kinds():
    batch = _small_batch()
    wide = dataclasses.replace(batch, state=batch.state.astype(np.float64), tick=batch.tick.astype(np.int32))
    received = message_to_transition_batch(over_the_wire(transition_batch_to_message(wide, seq=0)))
    assert received.state.dtype == np.float32 and received.tick.dtype == np.int64
    np.testing.assert_array_equal(received.state, batch.state)
    strided = dataclasses.replace(batch, state=np.asfortranarray(batch.state))
    received = message_to_transition_batch(over_the_wire(transition_batch_to_message(strided, seq=0)))
    np.testing.assert_array_equal(received.state, batch.state)
    received = message_to_transition_batch(
        over_the_wire(joined_batches_to_message([batch, wide, strided], 0))
    )
    np.testing.assert_array_equal(received.state, np.concatenate([batch.state] * 3))
    np.testing.assert_array_equal(received.tick, np.concatenate([batch.tick] * 3))
    with pytest.raises(WireError) as info:
        transition_batch_to_message(dataclasses.replace(batch, tick=batch.tick.astype(np.float64)), seq=0)
    assert info.value.reason == "encode"


def test_a_batch_in_the_one_frame_per_array_form_is_still_read():
    batch = _small_batch()
    received = message_to_transition_batch(_unpacked_message())
    for name in FIELD_DTYPES:
        np.testing.assert_array_equal(getattr(received, name), getattr(batch, name), err_msg=name)


def test_transition_message_with_missing_or_extra_array_is_refused():
    assert _reason(_unpacked_message(reward=None)) == "schema"
    assert _reason(_unpacked_message(surprise=np.zeros(4))) == "schema"


def test_transition_message_with_wrong_dtype_or_rows_is_refused():
    assert _reason(_unpacked_message(reward=np.zeros(4, np.float64))) == "schema"
    assert _reason(_unpacked_message(reward=np.zeros(5, np.float32))) == "schema"
    assert _reason(_unpacked_message(**{"img/front": np.zeros((4, 8, 8, 3), np.float32)})) == "schema"
    assert _reason(_unpacked_message(instruction_index=np.full(4, 9, np.int32))) == "schema"
    assert _reason(_unpacked_message(next_rows=np.array([7], np.int64))) == "schema"


def test_transition_message_with_nan_state_or_action_is_refused():
    state = np.zeros((4, 224), np.float32)
    state[2, 5] = np.nan
    assert _reason(_unpacked_message(state=state)) == "non_finite"
    assert _reason(_unpacked_message(action=np.full((4, 6), np.inf, np.float32))) == "non_finite"


def test_wrong_kind_is_refused():
    assert _reason(over_the_wire(Message("weights", "x", 0))) == "schema"


def test_weight_update_survives_the_wire_and_keeps_its_version():
    tensors = {"head.w": np.arange(12, dtype=np.float32).reshape(3, 4), "head.b": np.zeros(3, np.float16)}
    update = WeightUpdate.build(17, tensors, subset="trainable", created_time=1.5)
    got = message_to_weight_update(over_the_wire(weight_update_to_message(update, "learner")))
    assert (got.policy_version, got.subset, got.digest, got.created_time) == (
        17,
        "trainable",
        update.digest,
        1.5,
    )
    for name, t in tensors.items():
        np.testing.assert_array_equal(got.tensors[name], t)


def test_a_weight_update_keeps_its_publisher_session_over_the_wire():
    tensors = {"b": np.zeros(3, np.float32)}
    update = WeightUpdate(3, tensors, weights_digest(tensors), "trainable", 0.0, "a1b2c3")
    assert (
        message_to_weight_update(over_the_wire(weight_update_to_message(update, "learner"))).session
        == "a1b2c3"
    )


def _weights_reason(message: Message) -> str:
    with pytest.raises(WireError) as info:
        message_to_weight_update(message)
    return info.value.reason


def test_corrupted_weight_update_is_refused_by_digest():
    update = WeightUpdate.build(3, {"w": np.ones(8, np.float32)})
    msg = weight_update_to_message(update, "learner")
    frames = [bytes(f) for f in encode(msg)]
    corrupted = bytearray(frames[1])
    corrupted[0] ^= 0xFF
    assert _weights_reason(decode([frames[0], bytes(corrupted)])) == "digest"


def test_reshaped_weights_with_same_bytes_do_not_match_the_digest():
    update = WeightUpdate.build(3, {"w": np.ones((2, 4), np.float32)})
    msg = weight_update_to_message(update, "learner")
    reshaped = Message(msg.kind, msg.sender, msg.seq, {"w": np.ones((4, 2), np.float32)}, msg.meta)
    assert _weights_reason(over_the_wire(reshaped)) == "digest"


def test_non_finite_weights_are_refused():
    update = WeightUpdate.build(3, {"w": np.array([1.0, np.nan], np.float32)})
    assert _weights_reason(over_the_wire(weight_update_to_message(update, "learner"))) == "non_finite"


def test_weight_meta_must_be_well_formed():
    update = WeightUpdate.build(3, {"w": np.ones(2, np.float32)})
    msg = weight_update_to_message(update, "learner")
    bad = Message(msg.kind, msg.sender, msg.seq, msg.arrays, {**msg.meta, "subset": "some"})
    assert _weights_reason(over_the_wire(bad)) == "schema"
