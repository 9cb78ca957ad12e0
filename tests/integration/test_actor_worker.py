"""Wall-clock mode with the policy in a real worker process."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from doubles import LineEnv

from robotrl.actor.compose import build_loop
from robotrl.actor.timing import InferenceFailedError
from robotrl.actor.worker import ProcessInference, WorkerSpec
from robotrl.config.actor import ActorConfig, Strategy

TESTS = str(Path(__file__).resolve().parents[1])
H = 8


def worker(**policy_kwargs: object) -> ProcessInference:
    spec = WorkerSpec("doubles:make_tick_policy", {"horizon": H, **policy_kwargs}, pythonpath=[TESTS])
    return ProcessInference(spec, startup_timeout_s=60)


def wall_loop(backend: ProcessInference, env: LineEnv, timeout_s: float = 5.0):
    cfg = ActorConfig(strategy=Strategy.naive_async, virtual_time=False)
    return build_loop(env, backend, cfg, H, latency=None, inference_timeout_s=timeout_s)


@pytest.mark.timeout(120)
def test_wall_clock_episode_with_a_worker_process_keeps_every_tick_fed():
    backend = worker(infer_s=0.03)  # 30 ms inference: 2 ticks at 50 Hz
    try:
        env = LineEnv(max_ticks=50, hz=50.0)
        result = wall_loop(backend, env).run_episode(0, seed=0)
    finally:
        backend.close()
    assert result.failure is None and result.ticks == 50
    assert result.chunks_merged >= 50 // H
    # Measured in ticks actually consumed: a stall (a loaded machine) re-anchors the clock and
    # skips ticks, so an inference can then span fewer ticks than its wall time.
    assert min(result.delays[1:]) >= 2 or result.missed_deadlines > 0
    # TickPolicy's row for tick t is t whatever chunk it comes from: nothing skipped or repeated,
    # unless a tick starved (then the last command is held).
    values = [float(a[0]) for a in env.executed]
    assert values[0] == 0.0 and all(b - a in (0.0, 1.0) for a, b in itertools.pairwise(values))
    assert sum(b == a for a, b in itertools.pairwise(values)) == result.starved_ticks


@pytest.mark.timeout(120)
def test_weights_staged_in_the_worker_are_announced_and_used_before_the_plan_runs_out():
    horizon = 200  # one chunk would last the whole episode: only a refresh brings the new weights
    spec = WorkerSpec(
        "doubles:make_tick_policy",
        {"horizon": horizon, "infer_s": 0.02},
        weights_factory="doubles:make_delayed_bias_update",
        weights_kwargs={"version": 7, "bias": 0.5, "after_s": 1.0},
        pythonpath=[TESTS],
    )
    backend = ProcessInference(spec, startup_timeout_s=60)
    try:
        env = LineEnv(max_ticks=150, hz=50.0)
        cfg = ActorConfig(strategy=Strategy.prefix, virtual_time=False)
        result = build_loop(env, backend, cfg, horizon, latency=None).run_episode(0, seed=0)
    finally:
        backend.close()
    assert result.failure is None and result.weight_refreshes == 1
    assert result.policy_versions[0] == 0 and result.policy_versions[-1] == 7
    assert backend.newest_version() == 7
    assert float(env.executed[-1][0]) % 1 == 0.5  # the last ticks ran the new weights' actions


@pytest.mark.timeout(120)
def test_crashed_worker_is_detected_and_the_arm_holds():
    backend = worker(crash_calls=[3])
    try:
        env = LineEnv(max_ticks=200, hz=50.0)
        result = wall_loop(backend, env).run_episode(0, seed=0)
    finally:
        backend.close()
    assert result.failure is not None and "exited with code 3" in result.failure
    assert result.ticks < 200
    assert np.array_equal(env.executed[-1], env.executed[-2])  # held


@pytest.mark.timeout(120)
def test_hung_worker_misses_its_deadline_and_the_actor_reports_it():
    backend = worker(hang_calls=[2])
    try:
        env = LineEnv(max_ticks=500, hz=50.0)
        result = wall_loop(backend, env, timeout_s=0.5).run_episode(0, seed=0)
    finally:
        backend.close()
    assert result.failure is not None and "no answer within 0.5 s" in result.failure
    assert result.ticks < 500


@pytest.mark.timeout(120)
def test_worker_that_cannot_build_its_policy_fails_at_start():
    spec = WorkerSpec("doubles:no_such_factory", pythonpath=[TESTS])
    with pytest.raises(InferenceFailedError, match="exited with code"):
        ProcessInference(spec, startup_timeout_s=60)


@pytest.mark.timeout(120)
def test_the_worker_fills_a_pipelined_request_from_the_chunk_it_continues_clipped_to_the_bounds():
    from robotrl.core.types import InferenceRequest, Observation

    spec = WorkerSpec(
        "doubles:make_tick_policy",
        {"horizon": H, "noise": 0.5},
        pythonpath=[TESTS],
        action_bounds=[[-1e6, -1e6], [5.0, 5.0]],
    )
    backend = ProcessInference(spec, startup_timeout_s=60)

    def obs(tick: int) -> Observation:
        return Observation(tick, np.array([0.0, 0.0, 0.0], np.float32))

    try:
        backend.submit(InferenceRequest(1, 0, obs(0), None, 0, seed=1))
        backend.submit(InferenceRequest(2, 0, obs(3), None, 6, seed=2, continues=1))  # rows 3..7, then held
        first, second = backend.wait(30), backend.wait(30)
    finally:
        backend.close()
    assert first is not None and second is not None and (first.request_id, second.request_id) == (1, 2)
    assert first.actions is not None and second.actions is not None
    expected = np.clip(np.concatenate([first.actions[3:], first.actions[-1:]]), -1e6, 5.0)
    assert first.actions.max() > 5.0  # the clip is exercised
    assert np.array_equal(second.actions[:6], expected)
