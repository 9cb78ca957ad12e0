"""A running (Polyak) average of a module's weights, kept beside the weights being trained.

Pretraining (``pretrain.ema``) and the learner (``learner.policy_ema``) both train the last
iterate and save or publish the average: at a constant learning rate the iterate wanders.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import torch


class WeightAverage:
    """``decay`` per :meth:`update`; iterating yields the averaged tensors, in ``params`` order."""

    def __init__(self, params: Iterable[torch.Tensor], decay: float) -> None:
        self.params = list(params)
        self.decay = decay
        self.values = [p.detach().clone() for p in self.params]

    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter(self.values)

    def update(self) -> None:
        with torch.no_grad():
            for avg, p in zip(self.values, self.params, strict=True):
                avg.lerp_(p, 1.0 - self.decay)

    def load(self, source: Sequence[torch.Tensor]) -> None:
        """Set the average to ``source`` (a saved average, or the weights themselves)."""
        with torch.no_grad():
            for avg, value in zip(self.values, source, strict=True):
                avg.copy_(value)

    @contextmanager
    def swapped_in(self) -> Iterator[None]:
        """The average in the weights for the block (validate, save, publish); the iterate after."""
        iterate = [p.detach().clone() for p in self.params]
        self._copy_into_params(self.values)
        try:
            yield
        finally:
            self._copy_into_params(iterate)

    def _copy_into_params(self, source: Sequence[torch.Tensor]) -> None:
        with torch.no_grad():
            for p, value in zip(self.params, source, strict=True):
                p.copy_(value)
