"""Typed messages on top of the codec: transition batches and weight updates.

Each kind maps a core type to a :class:`~robotrl.wire.codec.Message` and back. The
``from_message`` side checks everything a peer could get wrong beyond what the
codec checks (array names and roles, row counts, finiteness, the weight digest)
and raises :class:`~robotrl.wire.codec.WireError` with reason ``schema``,
``non_finite`` or ``digest``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from robotrl.core.batch import TransitionBatch
from robotrl.core.columns import ARRAY_COLUMNS, FINITE
from robotrl.core.types import WeightUpdate, weights_digest
from robotrl.wire.codec import Message, WireError

TRANSITIONS: Final = "transitions"
WEIGHTS: Final = "weights"

_IMG = "img/"
_NEXT_IMG = "next_img/"
_TRANSITION_ARRAYS: Final = {
    **{c.name: c.dtype for c in ARRAY_COLUMNS},
    **{c.next_name: c.dtype for c in ARRAY_COLUMNS if c.next_name},
    "instruction_index": np.dtype(np.int32),
    "next_rows": np.dtype(np.int64),
}
"""The plain arrays of a transition message and their dtypes: every array column of the schema,
its next-observation twin, and the batch's instruction and next-row indices."""


def transition_batch_to_message(batch: TransitionBatch, seq: int) -> Message:
    """The wire form of ``batch``, sequence number ``seq`` in its actor's stream."""
    arrays: dict[str, npt.NDArray[Any]] = {name: getattr(batch, name) for name in _TRANSITION_ARRAYS}
    arrays.update({_IMG + cam: img for cam, img in batch.images.items()})
    arrays.update({_NEXT_IMG + cam: img for cam, img in batch.next_images.items()})
    return Message(TRANSITIONS, batch.actor_id, seq, arrays, {"instructions": list(batch.instructions)})


def non_finite_arrays(message: Message) -> list[str]:
    """Names of the arrays of a transition message that must be finite and are not: a batch
    the learner would refuse, which a sender drops instead of resending forever."""
    return [n for n in FINITE if n in message.arrays and not np.isfinite(message.arrays[n]).all()]


def message_to_transition_batch(message: Message) -> TransitionBatch:
    """A :class:`TransitionBatch` from a decoded message; arrays stay zero-copy views."""
    if message.kind != TRANSITIONS:
        raise WireError("schema", f"expected a {TRANSITIONS!r} message, got {message.kind!r}")
    arrays = message.arrays
    images = {n[len(_IMG) :]: a for n, a in arrays.items() if n.startswith(_IMG)}
    next_images = {n[len(_NEXT_IMG) :]: a for n, a in arrays.items() if n.startswith(_NEXT_IMG)}
    plain = {n for n in arrays if not n.startswith((_IMG, _NEXT_IMG))}
    if plain != set(_TRANSITION_ARRAYS):
        missing = sorted(set(_TRANSITION_ARRAYS) - plain)
        extra = sorted(plain - set(_TRANSITION_ARRAYS))
        raise WireError("schema", f"transition arrays: missing {missing}, unexpected {extra}")
    for name, dtype in _TRANSITION_ARRAYS.items():
        if arrays[name].dtype != dtype:
            raise WireError("schema", f"transition array {name!r} is {arrays[name].dtype}, expected {dtype}")
    for cam, img in (*images.items(), *next_images.items()):
        if img.dtype != np.uint8:
            raise WireError("schema", f"camera {cam!r} is {img.dtype}, expected uint8")
    for name in FINITE:
        if not np.isfinite(arrays[name]).all():
            raise WireError("non_finite", f"transition array {name!r} holds NaN or inf")
    instructions = message.meta.get("instructions")
    if not isinstance(instructions, list) or not all(isinstance(s, str) for s in instructions):
        raise WireError("schema", "meta.instructions must be a list of strings")
    try:
        return TransitionBatch(
            actor_id=message.sender,
            images=images,
            next_images=next_images,
            instructions=tuple(instructions),
            **{name: arrays[name] for name in _TRANSITION_ARRAYS},
        )
    except ValueError as exc:
        raise WireError("schema", f"inconsistent transition batch: {exc}") from exc


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
