"""What fuzzing feeds the runtime: every kind of message a peer can send, valid and mutated.

``valid_messages()`` builds one well-formed message of every kind on both links
(transitions, ping, pong, ack, want, wbeat, wpiece, wseal); ``mutate`` damages an
encoding the ways a buggy or hostile peer would (flip, cut, splice bytes, drop,
repeat or add frames, rewrite the header with arbitrary values); ``parse`` runs
exactly the checks a receiver runs on arrival (the codec, then the kind's schema:
transition batch, control fields, weight tensors) and returns the refusal reason.
Anything other than a refusal with a known reason (an exception, a hang, a huge
allocation) is a bug.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgpack
import numpy as np

from robotrl.core.batch import TransitionBatch
from robotrl.core.types import Observation, Transition
from robotrl.transport import protocol as p
from robotrl.transport.weight_checks import REFUSALS, WeightRefused, check_complete, check_tensor
from robotrl.wire.codec import REASONS, Message, WireError, decode, encode
from robotrl.wire.messages import TRANSITIONS, message_to_transition_batch, transition_batch_to_message

if TYPE_CHECKING:
    from hypothesis import settings

LAYOUT = {"w": ((4, 4), np.dtype(np.float32)), "b": ((4,), np.dtype(np.float32))}


def _batch(rows: int = 3) -> TransitionBatch:
    action = np.zeros(6, np.float32)

    def row(t: int) -> Transition:
        obs = Observation(t, np.ones(8, np.float32), {}, "reach", 0.0)
        return Transition("actor-0", 0, t, obs, action, action, 0.0, False, False, False, 0, t, 0, 0)

    return TransitionBatch.from_transitions([row(t) for t in range(rows)])


def valid_messages() -> list[list[bytes]]:
    """One encoded message of every kind either link carries."""
    plain = transition_batch_to_message(_batch(), 3)
    batch = Message(plain.kind, plain.sender, 3, plain.arrays, {**plain.meta, "stream": "s0"})
    w = np.ones((4, 4), np.float32)
    piece_meta = {"subset": "full", "created_time": 1.0, "index": 0, "count": 1, "session": "abc"}
    messages = [
        batch,
        p.control(p.PING, "actor-0", stream="s0", next=4, dropped=0),
        p.control(p.PONG, "learner", session="abc"),
        p.control(p.ACK, "learner", stream="s0", ranges=[[0, 4]]),
        p.control(p.WANT, "actor", have=-1, restart=False),
        p.control(p.WBEAT, "learner", session="abc", latest=2),
        Message(p.WPIECE, "learner", 2, {"b": np.zeros(4, np.float32), "w": w}, piece_meta),
        Message(p.WSEAL, "learner", 2, {}, {"digest": "00" * 32, "count": 1, "session": "abc"}),
    ]
    return [[bytes(f) for f in encode(m)] for m in messages]


def mutate(frames: list[bytes], how: int, at: int, data: bytes, value: Any) -> list[bytes]:
    """One damaged variant of ``frames``; ``how`` picks the damage, the rest parameterise it."""
    out = [bytearray(f) for f in frames]
    i = at % len(out)
    f = out[i]
    pos = (at // len(out)) % (len(f) + 1)
    match how % 8:
        case 0:  # overwrite bytes
            f[pos : pos + len(data)] = data
        case 1:  # cut the frame
            del f[pos:]
        case 2:  # insert bytes
            f[pos:pos] = data
        case 3:  # drop a frame
            del out[i]
        case 4:  # repeat a frame
            out.insert(i, bytearray(f))
        case 5:  # an extra frame
            out.append(bytearray(data))
        case 6:  # a header field set to an arbitrary value
            try:
                header = msgpack.unpackb(bytes(out[0]), raw=False, strict_map_key=False)
                if isinstance(header, dict) and header:
                    keys = sorted(header, key=str)
                    header[keys[pos % len(keys)]] = value
                out[0] = bytearray(msgpack.packb(header))
            except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
                pass
        case 7:  # a meta field set to an arbitrary value
            try:
                header = msgpack.unpackb(bytes(out[0]), raw=False, strict_map_key=False)
                meta = header.get("meta") if isinstance(header, dict) else None
                if isinstance(meta, dict):
                    keys = sorted(meta, key=str) or ["x"]
                    meta[keys[pos % len(keys)]] = value
                    out[0] = bytearray(msgpack.packb(header))
            except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
                pass
    return [bytes(x) for x in out]


def parse(frames: list[bytes]) -> str | None:
    """The checks a receiver runs on ``frames``; the refusal reason, or None when accepted."""
    try:
        message = decode(frames)
        kind = message.kind
        if kind == TRANSITIONS:
            p.meta_str(message, "stream")
            message_to_transition_batch(message)
        elif kind == p.PING:
            p.meta_str(message, "stream")
            p.meta_int(message, "next")
        elif kind == p.PONG:
            p.meta_str(message, "session")
        elif kind == p.ACK:
            p.meta_str(message, "stream")
            p.ack_ranges(message)
        elif kind == p.WANT:
            p.meta_int(message, "have", lo=-1)
        elif kind == p.WBEAT:
            p.meta_str(message, "session")
            p.meta_int(message, "latest", lo=-1)
        elif kind == p.WPIECE:
            p.meta_str(message, "session")
            p.meta_int(message, "index")
            p.meta_int(message, "count", lo=1)
            p.meta_number(message, "created_time")
            for name, arr in message.arrays.items():
                check_tensor(name, arr, LAYOUT)
            check_complete(message.arrays.keys(), "full", LAYOUT)
        elif kind == p.WSEAL:
            p.meta_str(message, "session")
            p.meta_int(message, "count", lo=1)
            p.meta_str(message, "digest")
        else:
            raise WireError("schema", f"unknown kind {kind!r}")
    except WireError as exc:
        assert exc.reason in REASONS, exc.reason  # noqa: PT017 - any other exception fails the fuzzer
        return exc.reason
    except WeightRefused as exc:
        assert exc.reason in REFUSALS, exc.reason  # noqa: PT017 - any other exception fails the fuzzer
        return exc.reason
    return None


def fixed_corpus(examples: int) -> settings:
    """Hypothesis settings for fuzzing: derandomized with no example database, so every CI run
    feeds the same corpus and a failure reproduces; no deadline or health checks: damaged inputs are slow."""
    from hypothesis import HealthCheck, settings  # here, not at the top: atheris instruments this module

    return settings(
        max_examples=examples,
        derandomize=True,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
