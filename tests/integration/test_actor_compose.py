"""compose_actor: every part of an actor from its config, the optional ones only when asked for."""

from __future__ import annotations

from pathlib import Path

import pytest

from robotrl.actor.compose import compose_actor, tee
from robotrl.config.load import load_config
from robotrl.core.types import Transition

BASE = ["policy=flow_tiny", "env.cameras=[]", "env.max_episode_ticks=20", "transport.batch_transitions=8"]


@pytest.mark.timeout(300)
def test_an_offline_actor_runs_an_episode_into_its_sink_without_pace_dataset_or_recording():
    cfg = load_config(BASE)
    got: list[Transition] = []
    parts = compose_actor(cfg, got.extend, online=False, observer=None)
    try:
        assert (parts.pace, parts.dataset, parts.recording) == (None, None, None)
        assert parts.horizon == cfg.policy.horizon
        result = parts.loop.run_episode(0, seed=cfg.actor.seed)
    finally:
        assert parts.close() is None  # no dataset recorded
    assert result.failure is None and len(got) == result.ticks == 20


@pytest.mark.timeout(300)
def test_actor_rerun_path_adds_a_recording_unless_the_caller_observes(tmp_path: Path):
    cfg = load_config([*BASE, f"actor.rerun_path={tmp_path / 'actor.rrd'}"])
    parts = compose_actor(cfg, None, online=False, observer=None)
    try:
        assert parts.recording is not None and parts.loop.observer is parts.recording
    finally:
        parts.close()
    assert (tmp_path / "actor.rrd").stat().st_size > 0

    class Watcher:
        def on_tick(self, *args: object) -> None: ...

        def on_chunk(self, *args: object) -> None: ...

    watcher = Watcher()
    parts = compose_actor(cfg, None, online=False, observer=watcher)
    try:
        assert parts.recording is None and parts.loop.observer is watcher
    finally:
        parts.close()


def test_tee_hands_every_batch_to_both_sinks_in_order():
    seen: list[str] = []
    both = tee(
        lambda batch: seen.append(f"first {len(batch)}"), lambda batch: seen.append(f"second {len(batch)}")
    )
    both([])
    assert seen == ["first 0", "second 0"]
    second: list[int] = []
    alone = tee(None, lambda batch: second.append(len(batch)))
    alone([])
    assert second == [0]


@pytest.mark.timeout(300)
def test_at_zero_delay_every_strategy_runs_the_actions_sync_runs_in_the_real_sim():
    """The same seed, a random flow policy sampling noise, MuJoCo: a "0 ms" inference leaves the
    asynchronous strategies nothing to overlap, so they must do exactly what stop-and-wait does."""

    def executed(strategy: str) -> list[list[float]]:
        cfg = load_config(
            [
                *BASE,
                "env.max_episode_ticks=70",
                "actor.latency.kind=constant",
                "actor.latency.median_s=0",
                f"actor.strategy={strategy}",
            ]
        )
        got: list[Transition] = []
        parts = compose_actor(cfg, got.extend, online=False, observer=None)
        try:
            parts.loop.run_episode(0, seed=7)
        finally:
            parts.close()
        return [t.action.tolist() for t in got]

    sync = executed("sync")
    assert len(sync) == 70
    for strategy in ("naive_async", "blend", "prefix"):
        assert executed(strategy) == sync, strategy
