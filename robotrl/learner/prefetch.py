"""Draw the next training batches in a background thread while the current one trains.

Gathering a batch (chunk rows, images from the memory maps) is CPU work that a GPU
update would otherwise wait for; numpy releases the GIL for most of it. Batches are
drawn at most ``depth`` ahead, so the lag cap and the rate limit they were drawn
under are at most that many batches old.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

Batch = Any


class Prefetcher:
    def __init__(self, draw: Callable[[], Batch], depth: int) -> None:
        if depth <= 0:
            raise ValueError(f"prefetch depth must be > 0, got {depth}")
        self._draw = draw
        self._queue: queue.Queue[Batch] = queue.Queue(depth)
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="prefetch", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                batch = self._draw()
            except LookupError:  # the buffers emptied (lag cap); wait for data
                self._stop.wait(0.01)
                continue
            except BaseException as exc:  # handed to the consumer, which raises it
                self._error = exc
                return
            while not self._stop.is_set():
                try:
                    self._queue.put(batch, timeout=0.1)
                    break
                except queue.Full:
                    continue

    def get(self) -> Batch:
        """The next batch; raises what drawing raised, or RuntimeError once closed."""
        while True:
            if self._stop.is_set():
                raise RuntimeError("prefetcher is closed")
            try:
                return self._queue.get(timeout=0.1)
            except queue.Empty:
                if self._error is not None:
                    raise self._error from None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
