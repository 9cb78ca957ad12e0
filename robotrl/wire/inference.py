"""Typed messages between the actor and its inference worker: requests, replies, and the worker's news.

The worker (:mod:`robotrl.actor.worker`) and the actor exchange these on a PAIR
socket, in the codec's frames: versioned by the codec's schema version, no pickle.
Each ``message_to_*`` checks the kind, the arrays and every meta field's type, and
raises :class:`~robotrl.wire.codec.WireError` with reason ``schema`` on anything a
peer could get wrong.

- ``infer`` actor -> worker (seq = request id): state, ``img/<camera>`` images and
  an optional committed ``prefix``; meta epoch, tick, delay, seed, continues, instruction,
  timestamp;
- ``chunk`` worker -> actor (seq = request id): ``actions`` unless inference failed;
  meta epoch, obs_tick, policy_version, infer_s, error;
- ``ready`` worker -> actor, once at start: what the policy is (:class:`WorkerReady`);
- ``staged`` worker -> actor (seq = the policy version staged): newer weights are loaded;
  meta staged_at, when (``time.monotonic``, one time line for the host's processes);
- ``stop`` actor -> worker: exit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from robotrl.core.types import InferenceReply, InferenceRequest, Observation
from robotrl.wire.codec import Message, WireError

INFER: Final = "infer"
CHUNK: Final = "chunk"
READY: Final = "ready"
STAGED: Final = "staged"
STOP: Final = "stop"

_IMG = "img/"
_REQUEST_META: Final = {
    "epoch": int,
    "tick": int,
    "delay": int,
    "seed": int,
    "continues": int,
    "instruction": str,
    "timestamp": float,
}
_REPLY_META: Final = {"epoch": int, "obs_tick": int, "policy_version": int, "infer_s": float}


@dataclass(frozen=True)
class WorkerReady:
    """What the worker's policy is, announced once it can infer."""

    horizon: int
    max_delay: int
    """The policy's trained prefix limit; -1 when it does not say."""
    action_dim: int
    policy_version: int
    pid: int


def _expect(message: Message, kind: str) -> None:
    if message.kind != kind:
        raise WireError("schema", f"expected a {kind!r} message, got {message.kind!r}")


def _checked_meta(message: Message, fields: Mapping[str, type]) -> dict[str, Any]:
    """The ``fields`` of ``message.meta``, each of its declared type (an int is a number too)."""
    out: dict[str, Any] = {}
    for key, kind in fields.items():
        value = message.meta.get(key)
        ok = isinstance(value, int | float) if kind is float else isinstance(value, kind)
        if not ok or isinstance(value, bool):
            raise WireError("schema", f"{message.kind}: meta {key!r} must be of type {kind.__name__}")
        out[key] = kind(value)
    return out


def _numeric(message: Message, name: str) -> npt.NDArray[Any]:
    arr = message.arrays.get(name)
    if arr is None or arr.dtype.kind not in "fiu":
        raise WireError("schema", f"{message.kind}: array {name!r} missing or not numeric")
    return arr


def request_to_message(request: InferenceRequest) -> Message:
    obs = request.observation
    arrays: dict[str, npt.NDArray[Any]] = {"state": obs.state}
    arrays.update({_IMG + c: img for c, img in obs.images.items()})
    if request.prefix is not None:
        arrays["prefix"] = request.prefix
    meta = {
        "epoch": request.epoch,
        "tick": obs.tick,
        "delay": request.delay,
        "seed": request.seed,
        "continues": request.continues,
        "instruction": obs.instruction,
        "timestamp": obs.timestamp,
    }
    return Message(INFER, "actor", request.request_id, arrays, meta)


def message_to_request(message: Message) -> InferenceRequest:
    """The request a decoded ``infer`` message carries."""
    _expect(message, INFER)
    m = _checked_meta(message, _REQUEST_META)
    images = {n[len(_IMG) :]: a for n, a in message.arrays.items() if n.startswith(_IMG)}
    for cam, img in images.items():
        if img.dtype != np.uint8:
            raise WireError("schema", f"camera {cam!r} is {img.dtype}, expected uint8")
    prefix = _numeric(message, "prefix") if "prefix" in message.arrays else None
    obs = Observation(m["tick"], _numeric(message, "state"), images, m["instruction"], m["timestamp"])
    return InferenceRequest(message.seq, m["epoch"], obs, prefix, m["delay"], m["seed"], m["continues"])


def reply_to_message(reply: InferenceReply) -> Message:
    arrays = {} if reply.actions is None else {"actions": reply.actions}
    meta = {name: getattr(reply, name) for name in (*_REPLY_META, "error")}
    return Message(CHUNK, "worker", reply.request_id, arrays, meta)


def message_to_reply(message: Message) -> InferenceReply:
    """The reply a decoded ``chunk`` message carries."""
    _expect(message, CHUNK)
    m = _checked_meta(message, _REPLY_META)
    error = message.meta.get("error")
    if error is not None and not isinstance(error, str):
        raise WireError("schema", f"{message.kind}: meta 'error' must be a string or None")
    actions = _numeric(message, "actions") if "actions" in message.arrays else None
    return InferenceReply(
        request_id=message.seq,
        epoch=m["epoch"],
        obs_tick=m["obs_tick"],
        actions=actions,
        policy_version=m["policy_version"],
        infer_s=m["infer_s"],
        error=error,
    )


def ready_to_message(ready: WorkerReady) -> Message:
    return Message(READY, "worker", 0, meta=asdict(ready))


def message_to_ready(message: Message) -> WorkerReady:
    _expect(message, READY)
    fields = {name: int for name in WorkerReady.__dataclass_fields__}
    return WorkerReady(**_checked_meta(message, fields))


def staged_message(policy_version: int, staged_at: float) -> Message:
    return Message(STAGED, "worker", policy_version, meta={"staged_at": staged_at})


def message_to_staged(message: Message) -> tuple[int, float]:
    """(policy version, the monotonic time it was installed in the worker's spare slot)."""
    _expect(message, STAGED)
    return message.seq, _checked_meta(message, {"staged_at": float})["staged_at"]


def stop_message() -> Message:
    return Message(STOP, "actor", 0)
