"""`robotrl bench codec`: encode + decode throughput of a transition batch.

Two payloads: state only (about 1 KB per transition) and state plus two 96x96 RGB
cameras. The codec path: build the message of a :class:`TransitionBatch`, encode
it to frames, copy every frame once into fresh bytes (what a socket delivers),
decode the frames and rebuild the batch with every validation. The baseline,
measured in the same run and interleaved with ours, copies the same arrays once
with ``tobytes`` and rebuilds them with ``frombuffer``: the ratio is what the
codec costs over the one copy a transfer cannot avoid. The baseline copies the batch's own
arrays (21 columns, and the camera frames), as they were before the codec packed the columns
into one frame. Each payload's ratio is reported
under its own name; ``ratio_vs_copy`` is the weaker of the two.

Stacking per-tick :class:`Transition` objects into a batch (what an actor does
before sending) is reported beside it, in transitions per second.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from robotrl.bench.report import report
from robotrl.core.batch import TransitionBatch
from robotrl.core.columns import ARRAY_COLUMNS
from robotrl.core.types import Transition
from robotrl.wire.codec import decode, encode
from robotrl.wire.messages import message_to_transition_batch, transition_batch_to_message

BATCH = 64
STATE_DIM = 224  # with the other columns, about 1 KB per transition
ACTION_DIM = 6
CAMERAS = ("front", "wrist")
IMAGE_SIZE = 96


@dataclasses.dataclass(frozen=True)
class Sizes:
    """The sizes of a :func:`random_batch` (a :class:`~robotrl.core.columns.Dims`)."""

    state_dim: int = STATE_DIM
    action_dim: int = ACTION_DIM
    image_size: int = IMAGE_SIZE


def random_batch(
    n: int, cameras: tuple[str, ...], rng: np.random.Generator, sizes: Sizes | None = None
) -> TransitionBatch:
    """``n`` consecutive ticks of one actor's episode, the last ending it with a next observation;
    every other column of the schema (:data:`~robotrl.core.columns.COLUMNS`) holds random values."""
    dims = sizes or Sizes()
    size = dims.image_size
    columns = {c.name: _random((n, *c.row_shape(dims)), c.dtype, rng) for c in ARRAY_COLUMNS}
    last = np.arange(n) == n - 1
    columns.update(tick=np.arange(n), episode_id=np.full(n, 7), terminated=last, truncated=np.zeros(n, bool))
    images = {c: rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8) for c in cameras}
    rows = TransitionBatch.of(
        "actor-0", columns, images, ("pick the cube", "place it"), np.arange(n, dtype=np.int32) % 2
    )
    nxt = {c.name: _random((1, *c.row_shape(dims)), c.dtype, rng) for c in ARRAY_COLUMNS if c.next_name}
    nxt["tick"] = np.array([n], np.int64)
    return rows.ending_with(nxt, {c: img[-1:].copy() for c, img in images.items()})


def make_transitions(n: int, cameras: tuple[str, ...], rng: np.random.Generator) -> list[Transition]:
    """:func:`random_batch` as one :class:`Transition` per tick."""
    return random_batch(n, cameras, rng).to_transitions()


def _random(shape: tuple[int, ...], dtype: np.dtype[Any], rng: np.random.Generator) -> npt.NDArray[Any]:
    """Random values of ``dtype``: normal floats, small integers, fair flags."""
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    return rng.integers(0, 1000, shape).astype(dtype)


def codec_round_trip(batch: TransitionBatch) -> TransitionBatch:
    frames = encode(transition_batch_to_message(batch, seq=1))
    delivered = [bytes(f) for f in frames]  # the one copy a transfer makes
    return message_to_transition_batch(decode(delivered))


def batch_arrays(batch: TransitionBatch) -> list[npt.NDArray[Any]]:
    """Every array ``batch`` holds: its columns and its camera frames (what the baseline copies;
    the message packs the columns into one frame, so its own arrays would flatter the baseline)."""
    columns = [v for f in dataclasses.fields(batch) if isinstance(v := getattr(batch, f.name), np.ndarray)]
    return [*columns, *batch.images.values(), *batch.next_images.values()]


def copy_round_trip(arrays: list[npt.NDArray[Any]]) -> list[npt.NDArray[Any]]:
    """The baseline: every array copied out and rebuilt once, all alive together like a message."""
    return [np.frombuffer(a.tobytes(), dtype=a.dtype).reshape(a.shape) for a in arrays]


def _blocks(fn: Callable[[], object], seconds: float) -> float:
    """Seconds per call, averaged over calls filling about ``seconds``."""
    calls = 0
    start = time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return elapsed / calls


def measure(batch: TransitionBatch, rounds: int, block_s: float) -> tuple[float, float]:
    """(codec seconds per batch, copy seconds per batch), medians of interleaved rounds."""
    arrays = batch_arrays(batch)
    codec_round_trip(batch)  # warm up
    codec_s, copy_s = [], []
    for _ in range(rounds):
        codec_s.append(_blocks(lambda: codec_round_trip(batch), block_s))
        copy_s.append(_blocks(lambda: copy_round_trip(arrays), block_s))
    return statistics.median(codec_s), statistics.median(copy_s)


def run(quick: bool = False) -> dict[str, float | str]:
    rng = np.random.default_rng(0)
    rounds, block_s = (3, 0.1) if quick else (7, 0.5)
    rows = []
    result: dict[str, float | str] = {"bench": "codec"}
    for label, cameras in (("state", ()), ("image", CAMERAS)):
        transitions = make_transitions(BATCH, cameras, rng)
        batch = TransitionBatch.from_transitions(transitions)
        stack = functools.partial(TransitionBatch.from_transitions, transitions)
        stack_s = statistics.median(_blocks(stack, block_s) for _ in range(rounds))
        codec_s, copy_s = measure(batch, rounds, block_s)
        payload = batch.nbytes
        mb = payload / 1e6
        codec_mbps, copy_mbps = mb / codec_s, mb / copy_s
        ratio = copy_s / codec_s
        rows.append([label, payload // BATCH, codec_mbps, copy_mbps, f"{ratio:.2f}", BATCH / stack_s])
        result[f"{label}_mb_per_s"] = round(codec_mbps, 1)
        result[f"{label}_tps"] = round(BATCH / codec_s)
        result[f"{label}_stack_tps"] = round(BATCH / stack_s)
        result[f"{label}_ratio_vs_copy"] = round(ratio, 3)
    result["ratio_vs_copy"] = min(result["state_ratio_vs_copy"], result["image_ratio_vs_copy"])  # the weaker
    report(
        f"codec: encode+decode of a {BATCH}-transition batch ({'quick' if quick else 'full'} run)",
        ["payload", "bytes/transition", "codec MB/s", "copy MB/s", "ratio vs copy", "stacking transitions/s"],
        rows,
        result,
    )
    return result
