"""The one message format on every robotrl link.

A message is a multipart ZeroMQ message: frame 0 is a msgpack header (schema
version, kind, sender, sequence number, free-form scalar ``meta``, and the name,
dtype and shape of every array); frames 1..n are the arrays' raw little-endian
bytes, in header order. No pickle anywhere: a peer can only make us build numeric
arrays from an allowlist of dtypes.

:func:`decode` validates everything (frame count, header size and structure, schema
version, dtypes, shapes against frame sizes, total size, optional finiteness)
before it builds anything, and builds arrays as zero-copy read-only views of the
frames. Every rejection is a :class:`WireError` whose ``reason`` is one of
:data:`REASONS`, so receivers can count rejections by cause.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgpack
import numpy as np
import numpy.typing as npt

SCHEMA_VERSION: Final = 1

#: dtypes a peer may send. No object, string, void or datetime dtypes, ever.
ALLOWED_DTYPES: Final[Mapping[str, np.dtype[Any]]] = {
    name: np.dtype(name).newbyteorder("<")
    for name in (
        "bool",
        "uint8",
        "int8",
        "uint16",
        "int16",
        "uint32",
        "int32",
        "uint64",
        "int64",
        "float16",
        "float32",
        "float64",
    )
}

#: Why a message was rejected; receivers count rejections by these.
REASONS: Final = (
    "frame_count",  # no frames, too many, or not one frame per declared array
    "truncated",  # a frame shorter than its declared array
    "size_mismatch",  # a frame longer than its declared array
    "oversized",  # header or total bytes over the limits
    "header",  # frame 0 is not a well-formed header
    "schema_version",  # a schema version this build does not speak
    "dtype",  # a dtype outside the allowlist
    "shape",  # a malformed shape or too many dimensions
    "non_finite",  # NaN or inf where finiteness is required
    "schema",  # well-formed, but not the message a kind promises (see wire.messages)
    "digest",  # a weight update whose tensors do not match its digest
    "encode",  # we were asked to send something the format cannot carry
)

_MAX_NAME = 256
_MAX_KIND = 64
_MAX_SENDER = 256
_MAX_SEQ = 2**63 - 1
_HEADER_KEYS: Final = frozenset(("v", "kind", "sender", "seq", "meta", "arrays"))


class WireError(ValueError):
    """A message that cannot be encoded or was refused on decode, with a countable reason."""

    def __init__(self, reason: str, detail: str) -> None:
        assert reason in REASONS, reason
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class WireLimits:
    """Bounds a decoder enforces before allocating anything."""

    max_frames: int = 256
    max_header_bytes: int = 256 * 1024
    max_total_bytes: int = 1 << 30
    max_ndim: int = 8


DEFAULT_LIMITS: Final = WireLimits()


@dataclass(frozen=True, slots=True)
class Message:
    """A decoded (or to-be-encoded) message.

    ``meta`` holds small msgpack-able values (numbers, strings, bools, None, lists
    and string-keyed maps of those); bulk data goes in ``arrays``.
    """

    kind: str
    sender: str
    seq: int
    arrays: Mapping[str, npt.NDArray[Any]] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)


Frame = bytes | bytearray | memoryview


_WIRE_NAME_OF: Final[Mapping[np.dtype[Any], str]] = {
    **{np.dtype(name): name for name in ALLOWED_DTYPES},
    **{np.dtype(name).newbyteorder(">"): name for name in ALLOWED_DTYPES},
}


def encode(message: Message, limits: WireLimits = DEFAULT_LIMITS) -> list[Frame]:
    """Frames for ``message``: header first, then one zero-copy buffer per array.

    Arrays that are already C-contiguous little-endian are not copied; hand the
    frames to ``send_multipart(..., copy=False)`` and keep the arrays alive and
    unchanged until sent.
    """
    specs: list[list[Any]] = []
    frames: list[Frame] = [b""]
    total = 0
    for name, arr in message.arrays.items():
        if not isinstance(arr, np.ndarray):
            raise WireError("encode", f"array {name!r} is {type(arr).__name__}, not a numpy array")
        if len(name) > _MAX_NAME:
            raise WireError("encode", f"array name longer than {_MAX_NAME} characters")
        if arr.ndim > limits.max_ndim:
            raise WireError("encode", f"array {name!r} has {arr.ndim} dims (max {limits.max_ndim})")
        dtype_name = _WIRE_NAME_OF.get(arr.dtype)
        if dtype_name is None:
            raise WireError("encode", f"array {name!r} has dtype {arr.dtype}, not one the wire carries")
        wire_dtype = ALLOWED_DTYPES[dtype_name]
        if arr.dtype != wire_dtype or not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr, dtype=wire_dtype)  # a copy only for odd layouts
        flat = arr.reshape(-1)
        total += flat.nbytes
        specs.append([name, dtype_name, list(arr.shape)])
        frames.append(memoryview(flat.view(np.uint8)))
    if total > limits.max_total_bytes:
        raise WireError("oversized", f"{total} array bytes exceed max_total_bytes {limits.max_total_bytes}")
    if len(frames) > limits.max_frames:
        raise WireError("frame_count", f"{len(frames)} frames exceed max_frames {limits.max_frames}")
    header = {
        "v": SCHEMA_VERSION,
        "kind": message.kind,
        "sender": message.sender,
        "seq": message.seq,
        "meta": dict(message.meta),
        "arrays": specs,
    }
    try:
        frames[0] = msgpack.packb(header, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise WireError("encode", f"header not msgpack-able: {exc}") from exc
    if len(frames[0]) > limits.max_header_bytes:
        raise WireError("oversized", f"header of {len(frames[0])} bytes exceeds {limits.max_header_bytes}")
    return frames


def _as_bytes_view(frame: object) -> memoryview:
    """A flat byte view of a frame: bytes, bytearray, memoryview or a zmq.Frame."""
    buf = getattr(frame, "buffer", frame)  # zmq.Frame exposes .buffer
    try:
        view = memoryview(buf)  # type: ignore[arg-type]
    except TypeError as exc:
        raise WireError("header", f"frame of type {type(frame).__name__} is not a buffer") from exc
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    return view


def _reject_ext(code: int, data: bytes) -> object:
    raise WireError("header", f"msgpack extension type {code} is not allowed")


def _parse_header(raw: memoryview, limits: WireLimits) -> dict[str, Any]:
    if len(raw) > limits.max_header_bytes:
        raise WireError("oversized", f"header of {len(raw)} bytes exceeds {limits.max_header_bytes}")
    try:
        header = msgpack.unpackb(raw, raw=False, strict_map_key=True, ext_hook=_reject_ext)
    except WireError:
        raise
    except Exception as exc:  # msgpack raises many types for bad input; all mean one thing
        raise WireError("header", f"frame 0 is not valid msgpack ({type(exc).__name__})") from exc
    if not isinstance(header, dict):
        raise WireError("header", f"header is a {type(header).__name__}, not a map")
    version = header.get("v")
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise WireError("schema_version", f"schema version {version!r}, this build speaks {SCHEMA_VERSION}")
    if header.keys() != _HEADER_KEYS:
        raise WireError("header", f"header keys {sorted(header)} are not {sorted(_HEADER_KEYS)}")
    kind, sender, seq = header["kind"], header["sender"], header["seq"]
    if not isinstance(kind, str) or not 0 < len(kind) <= _MAX_KIND:
        raise WireError("header", "kind must be a non-empty string of at most 64 characters")
    if not isinstance(sender, str) or len(sender) > _MAX_SENDER:
        raise WireError("header", "sender must be a string of at most 256 characters")
    if not isinstance(seq, int) or isinstance(seq, bool) or not 0 <= seq <= _MAX_SEQ:
        raise WireError("header", f"seq {seq!r} is not an integer in [0, 2**63)")
    if not isinstance(header["meta"], dict):
        raise WireError("header", "meta must be a map")
    if not isinstance(header["arrays"], list):
        raise WireError("header", "arrays must be a list")
    return header


def _parse_spec(spec: object, index: int, limits: WireLimits) -> tuple[str, np.dtype[Any], tuple[int, ...]]:
    if not isinstance(spec, list) or len(spec) != 3:
        raise WireError("header", f"array spec {index} is not [name, dtype, shape]")
    name, dtype_name, shape = spec
    if not isinstance(name, str) or not 0 < len(name) <= _MAX_NAME:
        raise WireError("header", f"array spec {index}: name must be a non-empty string")
    if not isinstance(dtype_name, str) or dtype_name not in ALLOWED_DTYPES:
        raise WireError("dtype", f"array {name!r}: dtype {dtype_name!r} is not allowed")
    if not isinstance(shape, list) or len(shape) > limits.max_ndim:
        raise WireError("shape", f"array {name!r}: shape must be a list of at most {limits.max_ndim} dims")
    for dim in shape:
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 0:
            raise WireError("shape", f"array {name!r}: shape {shape!r} has a non-natural dimension")
    return name, ALLOWED_DTYPES[dtype_name], tuple(shape)


def decode(
    frames: Sequence[object],
    limits: WireLimits = DEFAULT_LIMITS,
    require_finite: bool | Collection[str] = False,
) -> Message:
    """Validate ``frames`` and build a :class:`Message` of read-only zero-copy arrays.

    ``require_finite`` is True (every float array) or the names of arrays that
    must hold no NaN or inf. Raises :class:`WireError` and nothing else.
    """
    if not 1 <= len(frames) <= limits.max_frames:
        raise WireError("frame_count", f"{len(frames)} frames (allowed 1..{limits.max_frames})")
    header = _parse_header(_as_bytes_view(frames[0]), limits)
    specs = header["arrays"]
    if len(specs) != len(frames) - 1:
        raise WireError(
            "frame_count", f"header declares {len(specs)} arrays but {len(frames) - 1} frames follow"
        )

    # One pass: a frame's size is checked before its view is made, and views allocate nothing,
    # so a lying header costs no more than it would checked in a pass of its own.
    arrays: dict[str, npt.NDArray[Any]] = {}
    total = 0
    for index, (spec, frame) in enumerate(zip(specs, frames[1:], strict=True)):
        name, dtype, shape = _parse_spec(spec, index, limits)
        if name in arrays:
            raise WireError("header", f"array {name!r} declared twice")
        view = _as_bytes_view(frame)
        nbytes = math.prod(shape) * dtype.itemsize  # Python ints: a lying header cannot overflow
        total += nbytes
        if total > limits.max_total_bytes:
            raise WireError("oversized", f"declared arrays exceed max_total_bytes {limits.max_total_bytes}")
        if len(view) != nbytes:
            reason = "truncated" if len(view) < nbytes else "size_mismatch"
            raise WireError(reason, f"array {name!r}: frame has {len(view)} bytes, shape needs {nbytes}")
        if dtype.kind == "b" and nbytes and np.frombuffer(view, np.uint8).max() > 1:
            raise WireError("dtype", f"bool array {name!r} holds bytes other than 0 and 1")
        arr = np.frombuffer(view, dtype=dtype).reshape(shape)
        if not view.readonly:  # bytes and zmq frames are already read-only
            arr.flags.writeable = False
        arrays[name] = arr

    if require_finite:
        check = arrays.keys() if require_finite is True else require_finite
        for name in check:
            checked = arrays.get(name)
            if checked is not None and checked.dtype.kind == "f" and not np.isfinite(checked).all():
                raise WireError("non_finite", f"array {name!r} holds NaN or inf")

    return Message(header["kind"], header["sender"], header["seq"], arrays, header["meta"])
