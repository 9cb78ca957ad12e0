"""Weights between a torch module and the weight channel, and the two-slot hot swap.

Learner side: :func:`module_tensors` gives the numpy views to publish (all of the
state, or only the trainable parameters). Actor side: :func:`expected_layout`
tells a :class:`~robotrl.transport.weights.WeightSubscriber` what to accept;
:class:`HotSwapper` is the reusable receive-verify-install part of an inference
worker. Its background thread takes each verified update, copies it into the
spare of two copies of the policy (:class:`WeightSlots`), and the inference loop
calls :meth:`HotSwapper.poll` between two inferences, which only swaps which copy
is active: an O(1) step, so no inference ever sees half-loaded weights and none
waits for a copy.
"""

from __future__ import annotations

import logging
import threading
import warnings
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from robotrl.core.types import WeightUpdate
from robotrl.transport.background import lower_priority
from robotrl.transport.weights import Layout, WeightRefused, WeightSubscriber

log = logging.getLogger(__name__)


def module_tensors(module: torch.nn.Module, trainable_only: bool = False) -> dict[str, npt.NDArray[Any]]:
    """Numpy views (CPU) of ``module``'s state, or of its trainable parameters only.

    Views share memory with CPU tensors: publish them with ``copy=True`` (the default).
    """
    if trainable_only:
        items = [(n, t) for n, t in module.named_parameters() if t.requires_grad]
    else:
        items = list(module.state_dict().items())
    return {n: t.detach().cpu().numpy() for n, t in items}


def expected_layout(module: torch.nn.Module) -> Layout:
    """Every state tensor's shape and numpy dtype: what the module can accept."""
    return {
        n: (tuple(t.shape), np.dtype(str(t.dtype).removeprefix("torch.")))
        for n, t in module.state_dict().items()
    }


def install(module: torch.nn.Module, update: WeightUpdate, *, zero_copy: bool = False) -> None:
    """Put ``update`` into ``module``; raise WeightRefused on a name or shape mismatch.

    ``zero_copy`` makes a CPU module's tensors views of the update's arrays (for a
    verified update nobody will write to: the wire buffers stay alive as long as the
    module uses them) instead of copying 200 MB into the old ones; tensors on a GPU
    are always copied in place.
    """
    state = module.state_dict()
    for name, arr in update.tensors.items():
        target = state.get(name)
        if target is None:
            raise WeightRefused("names", f"module has no tensor {name!r}")
        if tuple(target.shape) != tuple(arr.shape):
            raise WeightRefused("shape", f"{name!r} is {tuple(arr.shape)}, module has {tuple(target.shape)}")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # from_numpy of a read-only wire view: only read
        tensors = {name: torch.from_numpy(np.asarray(arr)) for name, arr in update.tensors.items()}
        on_cpu = {n: t for n, t in tensors.items() if zero_copy and state[n].device.type == "cpu"}
        if on_cpu:
            module.load_state_dict(on_cpu, strict=False, assign=True)
        for name, tensor in tensors.items():
            if name not in on_cpu:  # a module on a GPU: one host-to-device copy
                state[name].copy_(tensor)


class WeightSlots:
    """Two copies of one policy: inference uses ``active``; updates load into the spare."""

    def __init__(self, active: torch.nn.Module, spare: torch.nn.Module) -> None:
        if active is spare:
            raise ValueError("the two slots must be two distinct modules")
        spare.load_state_dict(active.state_dict())
        self._slots = [active, spare]
        self._active = 0
        self.version = -1

    @property
    def active(self) -> torch.nn.Module:
        return self._slots[self._active]

    @property
    def spare(self) -> torch.nn.Module:
        return self._slots[1 - self._active]

    def swap(self, version: int) -> None:
        self._active = 1 - self._active
        self.version = version


class HotSwapper:
    """Receive, verify and stage weights in the background; swap between inferences.

    ``poll()`` must be called from the inference thread only, between inferences.
    It returns the version that became active, or None. By default the slots take the
    verified wire buffers themselves (no 200 MB copy; see :func:`install`). The background thread
    copies only while nothing is staged, so a swap never meets a half-copied spare;
    after a swap the new spare (the old active) is brought up to date before it
    takes the next update, unless that update covers every tensor anyway.
    """

    def __init__(self, subscriber: WeightSubscriber, slots: WeightSlots, *, zero_copy: bool = True) -> None:
        self._zero_copy = zero_copy
        self._sub = subscriber
        self._slots = slots
        self._lock = threading.Lock()
        self._staged: WeightUpdate | None = None  # in the spare, ready to swap
        self._behind: WeightUpdate | None = None  # active now, missing from the spare
        self._stop = threading.Event()
        self.installed = 0
        self.refused = 0
        self.active: WeightUpdate | None = None
        """The update the active slot holds (its ``created_time`` dates the publication)."""
        self._thread = threading.Thread(target=self._run, name="hotswap", daemon=True)
        self._thread.start()

    def poll(self) -> int | None:
        """Make the staged version active (O(1)), or return None when nothing is staged."""
        with self._lock:
            staged, self._staged = self._staged, None
            if staged is None:
                return None
            self._slots.swap(staged.version)
            self._behind = staged
            self.active = staged
        return staged.version

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        lower_priority()
        while not self._stop.is_set():
            update = self._sub.recv(0.05)
            if update is None:
                continue
            with self._lock:  # unstage: from here until restaged, poll() cannot swap
                unstaged, self._staged = self._staged, None
                behind, self._behind = self._behind, None
            for older in (behind, unstaged):
                if older is not None and not set(older.tensors) <= set(update.tensors):
                    install(self._slots.spare, older, zero_copy=self._zero_copy)
            try:
                install(self._slots.spare, update, zero_copy=self._zero_copy)
            except WeightRefused as exc:
                self.refused += 1
                log.warning("hotswap: refused version %d (%s); keeping the old weights", update.version, exc)
                if unstaged is None:  # install() checks before it writes: the spare is intact
                    continue
                update = unstaged
            else:
                self.installed += 1
            with self._lock:
                self._staged = update
