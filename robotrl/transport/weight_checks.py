"""What a weight update must pass before an actor installs it, and why it was refused.

The subscriber checks each piece as it arrives (:func:`check_tensor`) and the whole
update once sealed (:func:`check_complete`, the digest); :func:`verify` does both for
an update already assembled. Every refusal carries one of :data:`REFUSALS`, so it is
counted by cause.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from robotrl.core.protocols import ChunkPolicy
from robotrl.core.types import WeightUpdate, weights_digest

Layout = Mapping[str, tuple[tuple[int, ...], np.dtype[Any]]]
"""Tensor name -> (shape, dtype): what an actor's policy expects to receive."""

#: Why a weight update was refused; counted as ``refused_<reason>``.
REFUSALS: Final = ("partial", "digest", "non_finite", "names", "shape", "dtype", "malformed", "oversized")


def shipped_layout(policy: ChunkPolicy) -> Layout:
    """What a learner ships to ``policy``: its trainable tensors' names, shapes and dtypes."""
    return {name: (tuple(arr.shape), arr.dtype) for name, arr in policy.trainable_tensors().items()}


def layout_ceiling(expected: Layout) -> int:
    """Bytes of every tensor of ``expected`` at 8 bytes an element: the most an update of it may
    carry (the policy's size, or up to 8x for narrow dtypes), so that a wrong dtype is still read
    and refused as such."""
    return 8 * sum(int(np.prod(shape, dtype=np.int64)) for shape, _ in expected.values())


class WeightRefused(Exception):  # noqa: N818 (a refusal, not a program error)
    """An update that must not be installed, with a countable reason."""

    def __init__(self, reason: str, detail: str) -> None:
        assert reason in REFUSALS, reason
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def all_finite(arr: npt.NDArray[Any]) -> bool:
    """No NaN or inf in ``arr``. A sum is finite only if every term is (fast path, in the
    array's own precision: float32 sums twice as fast as a float64 one); a sum that
    overflows falls back to the exact element-wise check."""
    if arr.dtype.kind != "f" or arr.size == 0:
        return True
    if np.isfinite(arr.sum(dtype=arr.dtype if arr.dtype.itemsize >= 4 else np.float32)):
        return True
    return bool(np.isfinite(arr).all())


def check_tensor(name: str, arr: npt.NDArray[Any], expected: Layout | None) -> None:
    """Raise :class:`WeightRefused` unless ``arr`` may replace the tensor ``name``."""
    if expected is not None:
        if name not in expected:
            raise WeightRefused("names", f"unexpected tensor {name!r}")
        shape, dtype = expected[name]
        if tuple(arr.shape) != tuple(shape):
            raise WeightRefused("shape", f"{name!r} is {tuple(arr.shape)}, expected {tuple(shape)}")
        if arr.dtype != np.dtype(dtype):
            raise WeightRefused("dtype", f"{name!r} is {arr.dtype}, expected {np.dtype(dtype)}")
    if not all_finite(arr):
        raise WeightRefused("non_finite", f"{name!r} holds NaN or inf")


def check_complete(names: Collection[str], subset: str, expected: Layout | None) -> None:
    """Raise :class:`WeightRefused` unless ``names`` make a whole update of ``subset``."""
    if not names:
        raise WeightRefused("names", "an update without tensors")
    if expected is not None and subset == "full":
        absent = sorted(set(expected) - set(names))
        if absent:
            raise WeightRefused("names", f"a full update lacks {absent[:5]}")


def verify(update: WeightUpdate, expected: Layout | None) -> None:
    """Raise :class:`WeightRefused` unless ``update`` is safe to install over ``expected``."""
    for name, arr in update.tensors.items():
        check_tensor(name, arr, expected)
    check_complete(update.tensors.keys(), update.subset, expected)
    if weights_digest(update.tensors) != update.digest:
        raise WeightRefused("digest", f"version {update.policy_version}: tensors do not match the digest")
