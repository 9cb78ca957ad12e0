"""A chunk sample batch, what a replay buffer's ``sample`` returns and the algorithms read.

The observation keys are the dataset's (``observation.state``, ``action``, ...); the keys
below add what a chunk sample knows beyond them. Arrays are numpy, (B, ...) per key;
``task`` is a list of B strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

NEXT_PREFIX = "next."
"""Next-state keys are the observation keys with this prefix: ``next.observation.state``."""
ACTOR_SAMPLE_KEY = "actor_sample"
"""bool (B,): whether the actor may learn from the sample (a chunk start, a demonstration window,
or a window that starts on a tick a person drove)."""
POLICY_MASK_KEY = "policy_mask"
"""bool (B, H): the rows the actor may learn from: a chunk start's own chunk (the rows it
produced, after its committed prefix), every real row of a demonstration window, the rows a
person drove in a window that starts on one."""
REWARD_KEY = "reward"
"""float32 (B,): discounted reward sum over the chunk's real actions."""
DISCOUNT_KEY = "discount"
"""float32 (B,): ``gamma ** m`` for the chunk's ``m`` real actions (the bootstrap factor)."""
DONE_KEY = "done"
"""bool (B,): the episode terminated within the chunk (no bootstrap)."""
VERSION_KEY = "policy_version"
"""int64 (B,): policy version that produced the start tick's action (-1: not a policy's)."""
INTERVENTION_KEY = "intervention"
"""bool (B,): a human intervened on some real action of the chunk."""
RETURN_TO_GO_KEY = "return_to_go"
"""float32 (B,): discounted reward sum from the start tick to its episode's end; NaN while the
episode is open (or if it was cut before its end)."""

Batch = dict[str, Any]


def padded_rows(rows: npt.NDArray[np.int64], starts: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The storage rows of each window (B, H), a missing row (-1, past the episode's end)
    replaced by the window's last real one: the padding pretraining uses (policy.data).

    Padding rows are outside the loss (``action_mask``), but the policy attends to every
    row of its input; zeros there were actions the robot never took, and the pretrained
    policy's loss on demonstration windows near an episode's end was five times its own.
    """
    present = rows >= 0
    last = np.maximum.accumulate(np.where(present, np.arange(rows.shape[1]), 0), axis=1)
    filled = np.take_along_axis(rows, last, axis=1)
    return np.where(filled >= 0, filled, starts[:, None])


def concat(batches: Sequence[Batch]) -> Batch:
    """Samples from several buffers as one batch (same keys; lists extend, arrays stack)."""
    if len(batches) == 1:
        return batches[0]
    out: Batch = {}
    for key, first in batches[0].items():
        if isinstance(first, list):
            out[key] = [x for b in batches for x in b[key]]
        else:
            out[key] = np.concatenate([b[key] for b in batches])
    return out
