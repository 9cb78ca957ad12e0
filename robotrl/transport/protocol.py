"""Control messages of the two links, on the same codec as the data.

Transition link (actor DEALER -> learner ROUTER):

- ``transitions`` (seq = batch number in the stream; meta ``stream``): a batch;
- ``ping`` actor -> learner, every heartbeat period (meta ``stream``, ``next``:
  sequence numbers assigned so far, ``dropped``): liveness plus what the actor
  has numbered, so the learner can list what is missing;
- ``pong`` learner -> actor, the reply (meta ``session``: the learner's random
  id, new after every restart, which tells the actor to resend what is unacked);
- ``ack`` learner -> actor (meta ``stream``, ``ranges``: [lo, hi) pairs);
- ``fenced`` learner -> actor (meta ``stream``: the fenced process's own stream, ``epoch``:
  the newer process's): another process took this actor id over; the receiver stops sending.

Weight link (actor DEALER -> learner ROUTER):

- ``want`` subscriber -> publisher, every heartbeat period (meta ``have``: the
  newest version installed or -1, ``restart``: resend the current version from its
  first piece, ``host``: its boot id when it can map this host's shared memory,
  ``holding``: the segments its handed-out updates still use, at most 64, ``held_more``: it
  uses more than those, ``seen``: the newest ``wshm`` ``offer`` it dealt with, ``session``:
  the publisher session it follows, to which ``seen`` belongs);
- ``wbeat`` publisher -> subscriber, the reply (meta ``session``, ``latest``);
- ``wpiece`` publisher -> subscriber (seq = version; meta ``subset``, ``created_time``,
  ``index``, ``count``, ``session``): some whole tensors of one update, pieces in
  tensor-name order;
- ``wseal`` publisher -> subscriber after the last piece (seq = version; meta
  ``digest``, ``count``, ``session``). Versions are ordered within a session only
  (:mod:`robotrl.core.sessions`). The digest travels last so the publisher hashes while the
  first pieces are already on the wire, and the subscriber hashes each piece as it
  arrives.
- ``wshm`` publisher -> a subscriber whose ``host`` is the publisher's own, instead of the
  pieces and seal (seq = version; meta ``subset``, ``created_time``, ``session``, ``offer``:
  this announcement's number, counted per publisher,
  ``segment``: the file, ``tensors``: [name, dtype, shape, offset] each): the whole update,
  being written into shared memory (:mod:`robotrl.transport.weight_segments`).

Every accessor raises :class:`WireError` with reason ``schema`` on a malformed field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from robotrl.wire.codec import Message, WireError

PING: Final = "ping"
PONG: Final = "pong"
ACK: Final = "ack"
FENCED: Final = "fenced"
WANT: Final = "want"
WBEAT: Final = "wbeat"
WPIECE: Final = "wpiece"
WSEAL: Final = "wseal"
WSHM: Final = "wshm"


def meta_str(message: Message, key: str, max_len: int = 256) -> str:
    value = message.meta.get(key)
    if not isinstance(value, str) or not 0 < len(value) <= max_len:
        raise WireError("schema", f"{message.kind}: meta {key!r} must be a non-empty string")
    return value


def meta_int(message: Message, key: str, lo: int = 0) -> int:
    value = message.meta.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < lo:
        raise WireError("schema", f"{message.kind}: meta {key!r} must be an integer >= {lo}")
    return value


def meta_number(message: Message, key: str) -> float:
    value = message.meta.get(key)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise WireError("schema", f"{message.kind}: meta {key!r} must be a number")
    return float(value)


def control(kind: str, sender: str, **meta: Any) -> Message:
    return Message(kind, sender, 0, {}, meta)


def ack_ranges(message: Message) -> list[tuple[int, int]]:
    raw = message.meta.get("ranges")
    if not isinstance(raw, list) or len(raw) > 100_000:
        raise WireError("schema", "ack: meta 'ranges' must be a list of [lo, hi] pairs")
    out = []
    for pair in raw:
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in pair)
            or pair[1] <= pair[0]
        ):
            raise WireError("schema", f"ack: {pair!r} is not a [lo, hi) pair of naturals")
        out.append((pair[0], pair[1]))
    return out


def to_ranges(seqs: list[int]) -> list[list[int]]:
    """Sorted [lo, hi) runs covering ``seqs``: the compact form an ack carries."""
    out: list[list[int]] = []
    for s in sorted(set(seqs)):
        if out and out[-1][1] == s:
            out[-1][1] = s + 1
        else:
            out.append([s, s + 1])
    return out


def expect_kind(message: Message, kinds: Mapping[str, object] | tuple[str, ...]) -> None:
    if message.kind not in kinds:
        raise WireError("schema", f"unexpected message kind {message.kind!r} on this link")
