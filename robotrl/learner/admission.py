"""Value checks at ingest: a batch whose values no sane robot sends is refused before it is
journaled or stored.

The wire and the replay refuse NaN and infinity, but a finite 3e38 reward passes them and
overflows the critic to NaN a few updates later. :class:`Admission` refuses a batch whose
rewards, states or actions lie outside configured or physical bounds, whose policy versions
lie outside [0, the newest the learner knows] (-1, "no policy", is a person's or a
demonstration's row), or whose ticks are implausible (negative, past the episode limit, not
rising within an episode, also from one batch of a stream to a later-numbered one: a resend
that arrives late is not compared). A refused batch is acknowledged
and dropped (resending it would be refused again), counted per actor and reason, and logged
at most once per ``log_every_s`` per actor.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from robotrl.config.learner import GuardConfig
from robotrl.core.batch import TransitionBatch
from robotrl.core.types import EnvSpec

log = logging.getLogger(__name__)

REASONS: Final = ("reward", "state", "action", "policy_version", "tick")
"""Why a batch was refused, one counter each per actor."""
NO_POLICY: Final = -1
"""The policy version of a row no policy chose (a person's, a demonstration's)."""
MAX_COUNTED_ACTORS: Final = 1024
"""Actors whose refusals are counted and logged apart; any further ones share :data:`OTHER_ACTORS`,
so a peer claiming thousands of actor ids cannot grow these tables."""
OTHER_ACTORS: Final = "(other actors)"


@dataclass(frozen=True)
class ValueBounds:
    """What an admitted batch's values must lie within."""

    reward_abs_max: float
    state_abs_max: float
    action_low: npt.NDArray[np.float32]
    action_high: npt.NDArray[np.float32]
    max_episode_ticks: int

    @classmethod
    def of(cls, spec: EnvSpec, guard: GuardConfig) -> ValueBounds:
        """The env's action bounds widened by ``guard.action_margin`` of their range (an
        unbounded action dimension stays unbounded), the configured magnitudes, the env's
        episode limit."""
        low = np.asarray(spec.action_low, np.float64)
        high = np.asarray(spec.action_high, np.float64)
        with np.errstate(invalid="ignore"):  # inf - inf: an unbounded dimension stays unbounded
            slack = np.nan_to_num((high - low) * guard.action_margin, nan=np.inf)
        return cls(
            reward_abs_max=guard.reward_abs_max,
            state_abs_max=guard.state_abs_max,
            action_low=(low - slack).astype(np.float32),
            action_high=(high + slack).astype(np.float32),
            max_episode_ticks=spec.max_episode_ticks,
        )


class Admission:
    """Refuses implausible batches and counts refusals per actor and reason."""

    def __init__(
        self,
        bounds: ValueBounds,
        *,
        log_every_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bounds = bounds
        self.refused: dict[str, Counter[str]] = {}
        """Per actor id: refused batches by reason."""
        self._newest: dict[str, tuple[str, int, int, int]] = {}
        """Per actor: (stream, seq, episode, tick) of the last row of its newest admitted batch."""
        self._log_every_s, self._clock = log_every_s, clock
        self._logged_at: dict[str, float] = {}

    def admit(self, batch: TransitionBatch, stream: str, seq: int, newest_version: int) -> bool:
        """Whether ``batch`` (number ``seq`` of ``stream``) may be stored; a refusal is counted
        and logged."""
        problem = self.problem(batch, stream, seq, newest_version)
        if problem is None:
            newest = self._newest.get(batch.actor_id)
            if len(batch) and (newest is None or newest[0] != stream or seq > newest[1]):
                self._newest[batch.actor_id] = (stream, seq, int(batch.episode_id[-1]), int(batch.tick[-1]))
            return True
        reason, detail = problem
        actor = batch.actor_id
        if actor not in self.refused and len(self.refused) >= MAX_COUNTED_ACTORS:
            actor = OTHER_ACTORS
        self.refused.setdefault(actor, Counter())[reason] += 1
        self._log(actor, reason, detail)
        return False

    def problem(
        self, batch: TransitionBatch, stream: str, seq: int, newest_version: int
    ) -> tuple[str, str] | None:
        """(reason, detail) of the first check ``batch`` fails, or None."""
        b = self.bounds
        if len(batch) == 0:
            return None
        reward = float(np.abs(batch.reward).max())
        if reward > b.reward_abs_max:
            return "reward", f"|reward| {reward:.3g} > {b.reward_abs_max:g}"
        state = max(_abs_max(batch.state), _abs_max(batch.next_state))
        if state > b.state_abs_max:
            return "state", f"|state| {state:.3g} > {b.state_abs_max:g}"
        # The executed action (the actor clips it to the bounds; a leader arm may overshoot a
        # little). The policy's proposal is not clipped, and the learner does not train on it.
        if ((batch.action < b.action_low) | (batch.action > b.action_high)).any():
            return "action", f"action outside [{b.action_low.min():g}, {b.action_high.max():g}]"
        versions = batch.policy_version
        if ((versions < NO_POLICY) | (versions > newest_version)).any():
            return "policy_version", (
                f"policy versions {int(versions.min())}..{int(versions.max())} outside "
                f"[0, {newest_version}] (or {NO_POLICY}: none)"
            )
        return self._tick_problem(batch, stream, seq)

    def _tick_problem(self, batch: TransitionBatch, stream: str, seq: int) -> tuple[str, str] | None:
        ticks, episodes, limit = batch.tick, batch.episode_id, self.bounds.max_episode_ticks
        if ticks.min() < 0 or ticks.max() > limit or (len(batch.next_tick) and batch.next_tick.max() > limit):
            return "tick", f"ticks {int(ticks.min())}..{int(ticks.max())} outside [0, {limit}]"
        same_episode = episodes[1:] == episodes[:-1]
        if (np.diff(ticks)[same_episode] <= 0).any():
            return "tick", "ticks do not rise within an episode"
        newest = self._newest.get(batch.actor_id)
        if newest is None or newest[0] != stream or newest[1] >= seq or newest[2] != int(episodes[0]):
            return None
        if int(ticks[0]) <= newest[3]:
            return (
                "tick",
                f"batch {seq} starts at tick {int(ticks[0])}, after tick {newest[3]} of episode {newest[2]}",
            )
        return None

    def counts(self) -> dict[str, int]:
        """Refused batches by reason, over every actor (for the metrics line)."""
        total: Counter[str] = Counter()
        for per_actor in self.refused.values():
            total.update(per_actor)
        return {f"refused_{reason}": total[reason] for reason in REASONS}

    def _log(self, actor_id: str, reason: str, detail: str) -> None:
        now = self._clock()
        if now - self._logged_at.get(actor_id, -np.inf) < self._log_every_s:
            return
        self._logged_at[actor_id] = now
        log.warning(
            "refused a batch of actor %r (%s: %s); refused from it so far: %s",
            actor_id,
            reason,
            detail,
            dict(self.refused[actor_id]),
        )


def _abs_max(values: npt.NDArray[np.float32]) -> float:
    return float(np.abs(values).max()) if values.size else 0.0
