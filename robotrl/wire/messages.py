"""Typed messages on top of the codec: transition batches and weight updates.

Each kind maps a core type to a :class:`~robotrl.wire.codec.Message` and back. The
``from_message`` side checks everything a peer could get wrong beyond what the
codec checks (array names and roles, row counts, finiteness, the weight digest)
and raises :class:`~robotrl.wire.codec.WireError` with reason ``schema``,
``non_finite`` or ``digest``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from robotrl.core.batch import TransitionBatch
from robotrl.core.columns import FINITE
from robotrl.core.types import WeightUpdate, weights_digest
from robotrl.wire.codec import Message, WireError
from robotrl.wire.packed_columns import FIELD_DTYPES, PackedDims, layout

TRANSITIONS: Final = "transitions"
WEIGHTS: Final = "weights"

_IMG = "img/"
_NEXT_IMG = "next_img/"
_COLUMNS = "columns"


def transition_batch_to_message(batch: TransitionBatch, seq: int) -> Message:
    """The wire form of ``batch``, sequence number ``seq`` in its actor's stream: the plain arrays
    packed into one ``columns`` frame (:mod:`robotrl.wire.packed_columns`), one frame per image array."""
    return joined_batches_to_message((batch,), seq)


def joined_batches_to_message(batches: Sequence[TransitionBatch], seq: int) -> Message:
    """The wire form of ``batches`` (one actor's, the same dimensions and cameras) as one batch,
    rows in order: each field copied once, straight into its frame. :class:`WireError` ``encode``
    for batches that do not join."""
    first = batches[0]
    if len(batches) == 1:
        joined, instructions, next_rows = None, first.instructions, len(first.next_rows)
    else:
        try:
            joined = TransitionBatch.joined_indices(batches)
        except ValueError as exc:
            raise WireError("encode", str(exc)) from exc
        instructions, next_rows = joined.instructions, len(joined.next_rows)
    rows = sum(len(b) for b in batches)
    dims = PackedDims(rows, next_rows, first.state.shape[1], first.action.shape[1])
    arrays: dict[str, npt.NDArray[Any]] = {_COLUMNS: layout(dims).pack(batches, joined)}
    for prefix, images in ((_IMG, "images"), (_NEXT_IMG, "next_images")):
        for cam in getattr(first, images):
            frames = [getattr(b, images)[cam] for b in batches]
            arrays[prefix + cam] = frames[0] if len(frames) == 1 else np.concatenate(frames)
    return Message(
        TRANSITIONS, first.actor_id, seq, arrays, {"instructions": list(instructions), "dims": list(dims)}
    )


def packed_non_finite(message: Message) -> list[str]:
    """The fields of a :func:`joined_batches_to_message` message that must be finite and are not
    (the learner would refuse it)."""
    return layout(PackedDims.parse(message.meta.get("dims"))).non_finite(message.arrays[_COLUMNS])


def message_to_transition_batch(message: Message) -> TransitionBatch:
    """A :class:`TransitionBatch` from a decoded message; arrays stay zero-copy views.

    Reads the packed form and the one-frame-per-array form that builds before the packing
    wrote (an actor's spool or a learner's journal may hold such batches across an upgrade)."""
    if message.kind != TRANSITIONS:
        raise WireError("schema", f"expected a {TRANSITIONS!r} message, got {message.kind!r}")
    try:
        return _transition_batch(message)
    except WireError:
        raise
    except (ValueError, TypeError, OverflowError, MemoryError) as exc:
        # A peer's message: whatever numpy or the batch raise on it is a refusal, never a crash.
        raise WireError("schema", f"inconsistent transition batch: {exc}") from exc


def _transition_batch(message: Message) -> TransitionBatch:
    """:func:`message_to_transition_batch`'s work, which may raise more than :class:`WireError`."""
    arrays = message.arrays
    images, next_images, plain = {}, {}, set()
    for name, array in arrays.items():
        if name.startswith(_IMG):
            images[name[len(_IMG) :]] = array
        elif name.startswith(_NEXT_IMG):
            next_images[name[len(_NEXT_IMG) :]] = array
        else:
            plain.add(name)
    if plain != {_COLUMNS} and plain != set(FIELD_DTYPES):
        raise WireError(
            "schema", f"transition arrays {sorted(plain)}: neither {_COLUMNS!r} nor one per field"
        )
    for cam, img in (*images.items(), *next_images.items()):
        if img.dtype != np.uint8:
            raise WireError("schema", f"camera {cam!r} is {img.dtype}, expected uint8")
    instructions = message.meta.get("instructions")
    if not isinstance(instructions, list) or not all(isinstance(s, str) for s in instructions):
        raise WireError("schema", "meta.instructions must be a list of strings")
    if plain == {_COLUMNS}:
        # The layout cuts each view to the shape the batch requires: only the rest is checked.
        columns = layout(PackedDims.parse(message.meta.get("dims"))).unpack(arrays[_COLUMNS])
        return TransitionBatch.of_shaped_columns(
            message.sender, columns, images, next_images, tuple(instructions)
        )
    return TransitionBatch(
        actor_id=message.sender,
        images=images,
        next_images=next_images,
        instructions=tuple(instructions),
        **_unpacked_columns(arrays),
    )


def _unpacked_columns(arrays: Mapping[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
    """The fields of a batch sent one frame per array, checked as :meth:`Layout.unpack` checks."""
    for name, dtype in FIELD_DTYPES.items():
        if arrays[name].dtype != dtype:
            raise WireError("schema", f"transition array {name!r} is {arrays[name].dtype}, expected {dtype}")
    for name in FINITE:
        if not np.isfinite(arrays[name]).all():
            raise WireError("non_finite", f"transition array {name!r} holds NaN or inf")
    return {name: arrays[name] for name in FIELD_DTYPES}


def weight_update_to_message(update: WeightUpdate, sender: str) -> Message:
    """The wire form of ``update``; its version doubles as the message sequence number."""
    meta = {
        "digest": update.digest,
        "subset": update.subset,
        "created_time": update.created_time,
        "session": update.session,
    }
    return Message(WEIGHTS, sender, update.policy_version, dict(update.tensors), meta)


def message_to_weight_update(message: Message) -> WeightUpdate:
    """A verified :class:`WeightUpdate`: finite tensors whose digest matches the header's."""
    if message.kind != WEIGHTS:
        raise WireError("schema", f"expected a {WEIGHTS!r} message, got {message.kind!r}")
    meta = message.meta
    digest, subset, created = meta.get("digest"), meta.get("subset"), meta.get("created_time")
    session = meta.get("session", "")
    if not isinstance(digest, str) or subset not in ("full", "trainable") or not isinstance(session, str):
        raise WireError(
            "schema", "weights meta needs digest and session strings and subset 'full' or 'trainable'"
        )
    if not isinstance(created, int | float) or isinstance(created, bool):
        raise WireError("schema", "weights meta created_time must be a number")
    tensors: Mapping[str, npt.NDArray[Any]] = message.arrays
    for name, tensor in tensors.items():
        if tensor.dtype.kind == "f" and not np.isfinite(tensor).all():
            raise WireError("non_finite", f"weight tensor {name!r} holds NaN or inf")
    if weights_digest(tensors) != digest:
        raise WireError("digest", f"weights version {message.seq}: digest does not match the tensors")
    return WeightUpdate(message.seq, tensors, digest, subset, float(created), session)
