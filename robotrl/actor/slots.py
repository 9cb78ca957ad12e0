"""Two weight slots: new weights load into the spare policy and go live between inferences.

Loading 50M parameters takes tens of milliseconds; doing it in the active policy would
either stall inference or tear it (half old, half new weights). Here an update is
checked against the policy's tensor layout (names, shapes, dtypes), loaded into the
spare without holding the lock the inference side takes, and the two slots swap only
when :meth:`PolicySlots.swap_if_staged` is called between two inferences. Every chunk
is then produced by exactly one version, and an inference never waits for a load.

The spare shares the active policy's frozen parameters (:func:`spare_of`): updates never write
them, so two slots of a VLA cost one model plus its trainable part, not two models.

Digest and finiteness are the weight source's job (a ``WeightSource`` yields only
verified updates), so they are not paid for twice. Versions are ordered within the
publisher's session (:mod:`robotrl.core.sessions`): a restarted learner's versions are
followed even below the ones held, a replaced session's are never staged again, and each
session change and (rate-limited) each refusal is logged.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from robotrl.core.log_limit import EveryFewSeconds
from robotrl.core.protocols import ChunkPolicy
from robotrl.core.sessions import SessionVersions
from robotrl.core.types import WeightUpdate
from robotrl.transport.background import at_lowest_priority

log = logging.getLogger(__name__)


def spare_of(active: ChunkPolicy) -> ChunkPolicy:
    """A copy of ``active`` for the spare slot that shares its frozen (``requires_grad=False``)
    parameters: identical weights, and the memory of the trainable part only."""
    frozen = {id(p): p for p in _parameters(active).values() if not p.requires_grad}
    spare: ChunkPolicy = copy.deepcopy(active, frozen)
    return spare


def release_in_background(tensors: dict[str, Any]) -> None:
    """Drop ``tensors`` on a thread of the lowest priority: unmapping and freeing the 200 MB an
    update replaced takes tens of ms, which must not delay the new version nor an inference."""
    at_lowest_priority(tensors.clear, "weights-release")


def _parameters(policy: ChunkPolicy) -> dict[str, Any]:
    named = getattr(policy, "named_parameters", None)  # torch modules; a fake policy has none
    return dict(named()) if callable(named) else {}


class PolicySlots:
    """An active and a spare copy of one policy, and the version each holds.

    ``zero_copy`` lets the spare keep the update's own (verified, read-only) arrays as
    its weights instead of copying them: right for a worker whose updates nobody else
    holds, wrong where the caller will reuse the arrays. The starting weights belong to the
    session "" (no publisher), which the first published update replaces.
    """

    def __init__(
        self,
        active: ChunkPolicy,
        spare: ChunkPolicy,
        policy_version: int = 0,
        *,
        zero_copy: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._active, self._spare = active, spare
        self._active_version = policy_version
        self._staged_version: int | None = None  # the spare holds it, complete
        self._sessions = SessionVersions(version=policy_version)  # the newest update staged
        self._refusal_log = EveryFewSeconds(log, logging.WARNING, clock=clock)
        self._zero_copy = zero_copy
        # The layout every update must fit, taken once: trainable_tensors() copies every weight
        # (200 MB for a 50M policy), far too slow to repeat per update, let alone under the lock.
        self._layout = {n: (t.shape, t.dtype) for n, t in spare.trainable_tensors().items()}
        theirs = _parameters(active)
        self._shared = frozenset(n for n, p in _parameters(spare).items() if theirs.get(n) is p)
        """Parameters both slots hold (see :func:`spare_of`): a full update's copies are not loaded."""
        self._lock = threading.Lock()  # guards the slots and versions; never held during a load
        self._load_lock = threading.Lock()  # one load at a time into the one spare
        self.refused: Counter[str] = Counter()
        self.swaps = 0

    @property
    def active(self) -> ChunkPolicy:
        return self._active

    @property
    def policy_version(self) -> int:
        return self._active_version

    @property
    def newest_version(self) -> int:
        """The newest complete version held: the staged one when there is one, else the active."""
        with self._lock:
            return self._active_version if self._staged_version is None else self._staged_version

    def _layout_problem(self, update: WeightUpdate) -> str | None:
        expected = self._layout
        for name, tensor in update.tensors.items():
            if name not in expected:
                if update.subset == "trainable":
                    return f"unknown tensor {name!r}"
                continue
            shape, dtype = expected[name]
            if tensor.shape != shape:
                return f"tensor {name!r} has shape {tensor.shape}, policy has {shape}"
            if tensor.dtype != dtype:
                return f"tensor {name!r} has dtype {tensor.dtype}, policy has {dtype}"
        if update.subset == "trainable" and set(update.tensors) != set(expected):
            return f"trainable update misses {sorted(set(expected) - set(update.tensors))[:3]}"
        return None

    def stage(self, update: WeightUpdate) -> bool:
        """Load ``update`` into the spare slot; False (old weights kept, reason counted) if refused.

        The spare holds nothing swappable while it is written, so a swap between two
        inferences never sees half an update; it simply finds nothing staged and goes on.
        """
        with self._load_lock:
            problem = self._layout_problem(update)
            with self._lock:
                refusal = self._sessions.refusal(update.session, update.policy_version)
                if refusal is not None:
                    self.refused[refusal] += 1
                    self._refusal_log.event(
                        "weights v%d of session %r refused (%s; newest staged: v%d of session %r)",
                        update.policy_version,
                        update.session,
                        refusal,
                        self._sessions.version,
                        self._sessions.session,
                    )
                    return False
                if problem is not None:
                    self.refused["layout"] += 1
                    log.warning("weights v%d refused: %s", update.policy_version, problem)
                    return False
                self._staged_version = None  # the spare is about to be overwritten
            replaced = _parameters(self._spare)  # freed after the stage, on a thread of its own
            try:
                tensors = {n: t for n, t in update.tensors.items() if n not in self._shared}
                self._spare.load_weights(tensors, zero_copy=self._zero_copy)
            except Exception as exc:  # whatever the policy refuses with: old weights kept, loader lives on
                with self._lock:
                    self.refused["load_error"] += 1
                log.warning("weights v%d refused by the policy: %s", update.policy_version, exc)
                return False
            with self._lock:
                self._staged_version = update.policy_version
                previous = self._sessions.take(update.session, update.policy_version)
            if previous is not None:
                self._log_session_change(previous, update)
            release_in_background(replaced)
            return True

    @staticmethod
    def _log_session_change(previous: tuple[str, int], update: WeightUpdate) -> None:
        if not previous[0]:  # the starting weights: the first publisher is no change worth a warning
            log.info("weights: following learner session %r from v%d", update.session, update.policy_version)
            return
        log.warning(
            "weights: learner session changed (%r at v%d -> %r at v%d); following the new session",
            *previous,
            update.session,
            update.policy_version,
        )

    def swap_if_staged(self) -> bool:
        """Between two inferences: make the staged weights active (True if so); never waits for a load."""
        with self._lock:
            if self._staged_version is None:
                return False
            self._active, self._spare = self._spare, self._active
            self._active_version, self._staged_version = self._staged_version, None
            self.swaps += 1
            return True
