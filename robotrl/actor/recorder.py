"""Every tick becomes a :class:`Transition` with every stamp the learner and audits need,
handed on in batches to a sink (the transport, when a learner listens) so nothing is
held back until the episode ends.
"""

from __future__ import annotations

from collections.abc import Callable

from robotrl.actor.queue import PlannedAction
from robotrl.core.protocols import StepResult
from robotrl.core.types import FloatArray, Observation, Transition

TransitionSink = Callable[[list[Transition]], None]


class TransitionRecorder:
    def __init__(self, actor_id: str, sink: TransitionSink | None, batch_size: int) -> None:
        self.actor_id = actor_id
        self._sink = sink
        self._batch_size = batch_size
        self._pending: list[Transition] = []
        self.recorded = 0

    def record(
        self,
        episode_id: int,
        observation: Observation,
        executed: FloatArray,
        planned: PlannedAction | None,
        result: StepResult,
        obs_time: float,
        action_time: float,
        intervention: bool = False,
    ) -> None:
        done = result.terminated or result.truncated
        self._pending.append(
            Transition(
                actor_id=self.actor_id,
                episode_id=episode_id,
                tick=observation.tick,
                observation=observation,
                action=executed,
                proposed_action=executed if planned is None else planned.action,
                reward=float(result.reward),
                terminated=bool(result.terminated),
                truncated=bool(result.truncated),
                intervention=intervention,
                chunk_id=-1 if planned is None else planned.chunk_id,
                index_in_chunk=-1 if planned is None else planned.index_in_chunk,
                policy_version=-1 if planned is None else planned.policy_version,
                delay_ticks=0 if planned is None else planned.delay_ticks,
                obs_time=obs_time,
                action_time=action_time,
                next_observation=result.observation if done else None,
            )
        )
        self.recorded += 1
        if len(self._pending) >= self._batch_size or done:
            self.flush()

    def flush(self) -> None:
        if self._pending and self._sink is not None:
            self._sink(self._pending)
        self._pending = []
