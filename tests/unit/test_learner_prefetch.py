"""The prefetcher keeps order, waits out empty buffers and hands errors to the consumer."""

from __future__ import annotations

import itertools

import pytest

from robotrl.learner.prefetch import Prefetcher


def test_batches_arrive_in_order_and_empty_buffers_are_waited_out():
    counter = itertools.count()

    def draw() -> int:
        n = next(counter)
        if n in (1, 2):
            raise LookupError("nothing ready yet")
        return n

    p = Prefetcher(draw, depth=2)
    try:
        assert [p.get() for _ in range(3)] == [0, 3, 4]
    finally:
        p.close()
    with pytest.raises(RuntimeError, match="closed"):
        p.get()


def test_an_error_while_drawing_is_raised_by_get():
    def draw() -> int:
        raise ValueError("bad batch")

    p = Prefetcher(draw, depth=1)
    with pytest.raises(ValueError, match="bad batch"):
        p.get()
    p.close()
