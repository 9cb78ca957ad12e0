"""The control loop in virtual time, with the policy in this process (the serial runner)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from doubles import ConstantLatency, LineEnv, ListLatency, LognormalLatency, TickPolicy

from robotrl.actor.compose import build_loop
from robotrl.actor.inference import InProcessInference
from robotrl.actor.slots import PolicySlots
from robotrl.config.actor import ActorConfig, Strategy
from robotrl.core.types import Transition, WeightUpdate, weights_digest

H = 8


def make(
    strategy: Strategy,
    latency,
    policy: TickPolicy | None = None,
    spare: TickPolicy | None = None,
    env: LineEnv | None = None,
    sink=None,
    weights=None,
    horizon: int = H,
    **cfg_kw,
):
    env = env or LineEnv(max_ticks=40)
    policy = policy or TickPolicy(horizon=horizon)
    slots = PolicySlots(policy, spare or TickPolicy(horizon=horizon))
    cfg = ActorConfig(strategy=strategy, virtual_time=True, **cfg_kw)
    loop = build_loop(
        env, InProcessInference(slots, weights), cfg, horizon, latency, sink=sink, max_prefix=horizon - 1
    )
    return loop, env, policy


def test_measured_delay_equals_the_ticks_consumed():
    transitions: list[Transition] = []
    loop, _env, _ = make(
        Strategy.naive_async, ConstantLatency(0.1), sink=transitions.extend
    )  # 3 ticks at 30 Hz
    result = loop.run_episode(0, seed=0)
    assert result.delays[0] == 0  # the first chunk: the robot waited, no tick was consumed
    assert set(result.delays[1:]) == {3}
    from_later_chunks = [t for t in transitions if t.chunk_id > 0]
    assert from_later_chunks and {t.delay_ticks for t in from_later_chunks} == {3}


def test_naive_async_executes_each_tick_from_the_newest_chunk_without_starving():
    loop, env, _ = make(Strategy.naive_async, ConstantLatency(0.1))
    result = loop.run_episode(0, seed=0)
    assert result.ticks == 40 and result.starved_ticks == 0
    # TickPolicy: the row for tick t of any chunk started at its obs tick is t.
    assert [float(a[0]) for a in env.executed] == [float(t) for t in range(40)]


def test_prefix_strategy_hands_over_exactly_the_committed_actions():
    policy = TickPolicy(horizon=H, noise=0.5)  # noisy chunks: a prefix mismatch would show
    loop, _env, _ = make(Strategy.prefix, ConstantLatency(0.1), policy=policy)
    result = loop.run_episode(0, seed=3)
    assert result.starved_ticks == 0 and result.prefix_overruns == 0
    given = [p for p in policy.prefixes if p is not None]
    assert given and all(len(p) == 3 for p in given)  # the expected delay, measured: 3 ticks


def test_sync_holds_the_robot_while_each_chunk_is_computed():
    loop, env, _ = make(Strategy.sync, ConstantLatency(0.1))
    result = loop.run_episode(0, seed=0)
    # Ticks 0-7 run the first chunk; each later chunk is asked for when the plan is empty
    # (ticks 8, 19, 30) and arrives 3 ticks later, while the robot holds.
    assert result.chunks_merged == 4
    assert result.starved_ticks == 9
    held = [t for t in range(1, 40) if np.array_equal(env.executed[t], env.executed[t - 1])]
    assert held == [8, 9, 10, 19, 20, 21, 30, 31, 32]


@pytest.mark.parametrize("strategy", list(Strategy))
def test_an_inference_shorter_than_a_tick_is_used_in_the_tick_that_asked_for_it(strategy):
    loop, env, _ = make(strategy, ConstantLatency(0.0))
    result = loop.run_episode(0, seed=0)
    assert result.starved_ticks == 0 and set(result.delays) == {0}
    assert result.chunks_merged >= 40 // H  # sync needed one per plan, without a held tick
    assert [float(a[0]) for a in env.executed] == [float(t) for t in range(40)]


def test_virtual_time_runs_are_bit_identical_for_a_seed():
    def run() -> tuple[list[float], list[int]]:
        loop, env, _ = make(
            Strategy.prefix, LognormalLatency(0.15, 0.5), policy=TickPolicy(horizon=H, noise=1.0)
        )
        result = loop.run_episode(0, seed=11)
        return [float(x) for a in env.executed for x in a], result.delays

    assert run() == run()


def test_latency_longer_than_the_plan_starves_and_counts_it():
    loop, env, _ = make(Strategy.naive_async, ListLatency([0.0, 0.5]))  # 15 ticks > H=8
    result = loop.run_episode(0, seed=0)
    assert result.starved_ticks > 0
    held = [a for a in env.executed[H : H + 3]]
    assert all(np.array_equal(held[0], h) for h in held)  # starved ticks hold the last command


def test_nan_and_wrong_shaped_chunks_never_reach_the_arm():
    policy = TickPolicy(horizon=H, nan_calls=[2], bad_shape_calls=[4])
    loop, env, _ = make(Strategy.naive_async, ConstantLatency(0.1), policy=policy)
    result = loop.run_episode(0, seed=0)
    assert result.chunks_refused == {"non_finite": 1, "shape": 1}
    assert all(np.isfinite(a).all() and a.shape == (2,) for a in env.executed)


def test_inference_errors_past_the_budget_stop_the_loop_with_the_arm_held():
    policy = TickPolicy(horizon=H, error_calls=[1, 2, 3, 4])
    loop, env, _ = make(Strategy.naive_async, ConstantLatency(0.0), policy=policy, max_inference_errors=3)
    result = loop.run_episode(0, seed=0)
    assert result.failure is not None and "3 consecutive inference errors" in result.failure
    assert result.inference_errors == 3
    assert np.array_equal(env.executed[-1], env.executed[-2])  # the last command repeated: hold


def test_nothing_from_an_old_episode_runs_in_a_new_one():
    # The episode ends (truncation at 10 ticks) while a slow inference is in flight.
    env = LineEnv(max_ticks=10)
    loop, env, _ = make(Strategy.naive_async, ListLatency([0.0, 0.3, 0.0, 0.0]), env=env)
    loop.run_episode(0, seed=1)
    loop.run_episode(1, seed=2)
    markers = {int(a[0] // 1000) for a in env.executed}
    assert markers == {2}  # every action of episode 1 came from its own observations


def test_weights_swap_between_inferences_and_stamp_the_version():
    class Updates:
        def __init__(self) -> None:
            self.pending = [WeightUpdate.build(5, {"bias": np.array([0.25], np.float32)}, subset="trainable")]

        def latest(self):
            return self.pending.pop() if self.pending else None

        def close(self) -> None:
            pass

    transitions: list[Transition] = []
    loop, _env, _ = make(
        Strategy.naive_async, ConstantLatency(0.1), sink=transitions.extend, weights=Updates()
    )
    loop.run_episode(0, seed=0)
    versions = [t.policy_version for t in transitions]
    assert versions[0] == 5  # installed before the first inference
    assert all(float(t.action[0]) % 1 == 0.25 for t in transitions)


class UpdateFromTick:
    """A weight source whose one update arrives once the env has reached ``tick`` (mid-episode)."""

    def __init__(self, env: LineEnv, tick: int) -> None:
        self.env, self.tick = env, tick
        self.update: WeightUpdate | None = WeightUpdate.build(
            5, {"bias": np.array([0.25], np.float32)}, subset="trainable"
        )

    def latest(self):
        if self.env.tick < self.tick or self.update is None:
            return None
        update, self.update = self.update, None
        return update

    def close(self) -> None:
        pass


@pytest.mark.parametrize("refresh", [True, False])
def test_newer_weights_are_used_at_once_when_refresh_is_on(refresh):
    transitions: list[Transition] = []
    env = LineEnv(max_ticks=60)
    loop, _env, _ = make(
        Strategy.prefix,
        ConstantLatency(0.1),  # 3 ticks; a chunk of 32 lasts 28 ticks before the next request
        env=env,
        horizon=32,
        sink=transitions.extend,
        weights=UpdateFromTick(env, tick=10),
        refresh_on_new_weights=refresh,
    )
    result = loop.run_episode(0, seed=0)
    first_new = next(t.tick for t in transitions if t.policy_version == 5)
    if refresh:  # asked for at the next tick, executed one inference (3 ticks) later
        assert result.weight_refreshes == 1 and first_new <= 10 + 1 + 3
    else:  # only at the next regular request, when the first plan runs low
        assert result.weight_refreshes == 0 and first_new >= 28
    assert result.starved_ticks == 0 and result.prefix_overruns == 0
    versions = [t.policy_version for t in transitions]
    assert versions == sorted(versions)  # never back to old weights


class UpdatesAtTicks:
    """A weight source whose updates each arrive once the env has reached their tick."""

    def __init__(self, env: LineEnv, updates: list[tuple[int, WeightUpdate]]) -> None:
        self.env, self.updates = env, list(updates)

    def latest(self):
        if not self.updates or self.env.tick < self.updates[0][0]:
            return None
        return self.updates.pop(0)[1]

    def close(self) -> None:
        pass


def test_a_restarted_learners_lower_version_is_used_at_once_like_a_newer_one():
    def update(version: int, bias: float, session: str) -> WeightUpdate:
        tensors = {"bias": np.array([bias], np.float32)}
        return WeightUpdate(version, tensors, weights_digest(tensors), "trainable", 0.0, session)

    transitions: list[Transition] = []
    env = LineEnv(max_ticks=90)
    updates = [(10, update(5, 0.25, "first")), (50, update(2, 0.5, "second"))]
    loop, _env, _ = make(
        Strategy.prefix,
        ConstantLatency(0.1),  # 3 ticks; a chunk of 32 lasts 28 ticks before the next request
        env=env,
        horizon=32,
        sink=transitions.extend,
        weights=UpdatesAtTicks(env, updates),
        refresh_on_new_weights=True,
    )
    result = loop.run_episode(0, seed=0)
    first_new = next(t.tick for t in transitions if t.policy_version == 2)
    assert result.weight_refreshes == 2 and first_new <= 50 + 1 + 3  # not only when the plan ran low
    after = [t for t in transitions if t.tick >= first_new]
    assert {t.policy_version for t in after} == {2} and all(float(t.action[0]) % 1 == 0.5 for t in after)


@pytest.mark.parametrize("horizon", [0, 8])
def test_an_execution_horizon_replans_every_so_many_ticks(horizon):
    transitions: list[Transition] = []
    loop, _env, _ = make(
        Strategy.prefix,
        ConstantLatency(0.1),  # 3 ticks
        env=LineEnv(max_ticks=60),
        horizon=32,
        sink=transitions.extend,
        execution_horizon=horizon,
    )
    result = loop.run_episode(0, seed=0)
    switches = [b.tick for a, b in itertools.pairwise(transitions) if b.chunk_id != a.chunk_id]
    if horizon:  # asked for at ticks 8, 16, ...; each runs from its arrival, 3 ticks later
        assert switches == [11, 19, 27, 35, 43, 51, 59]
    else:  # asked for when 3 + 2 planned actions are left: a chunk of 32 runs 27 ticks
        assert switches == [30, 57]
    assert result.starved_ticks == 0 and result.prefix_overruns == 0


def test_transitions_carry_every_stamp():
    transitions: list[Transition] = []
    loop, _env, _ = make(Strategy.naive_async, ConstantLatency(0.1), sink=transitions.extend, actor_id="a-9")
    loop.run_episode(7, seed=0)
    assert [t.tick for t in transitions] == list(range(40))
    assert {t.actor_id for t in transitions} == {"a-9"} and {t.episode_id for t in transitions} == {7}
    last = transitions[-1]
    assert last.truncated and last.next_observation is not None and last.next_observation.tick == 40
    assert all(t.next_observation is None for t in transitions[:-1])
    assert all(0 <= t.index_in_chunk < H for t in transitions)
    assert all(t.action_time >= t.obs_time for t in transitions)


@pytest.mark.parametrize("strategy", list(Strategy))
def test_every_strategy_finishes_an_episode(strategy):
    loop, _env, _ = make(strategy, LognormalLatency(0.15, 0.3))
    result = loop.run_episode(0, seed=4)
    assert result.ticks == 40 and result.failure is None


def test_summary_reports_success_rate_with_an_interval():
    from robotrl.actor.report import summarize, wilson_interval

    env = LineEnv(max_ticks=40, goal=20.0)  # TickPolicy reaches 20 at tick 20
    loop, _, _ = make(Strategy.naive_async, ConstantLatency(0.1), env=env)
    results = [loop.run_episode(i, seed=0) for i in range(3)]
    summary = summarize(results, control_hz=30.0, wall_clock=False)
    assert summary["episodes"] == 3 and summary["success_rate"] == 1.0
    assert summary["mean_time_to_success_s"] == pytest.approx(21 / 30.0)
    assert summary["ci95"][1] == 1.0 and 0.3 < summary["ci95"][0] < 0.5
    assert summary["starved_ticks"] == 0 and summary["mean_delay_ticks"] == 3.0
    assert summary["outcomes"] == {"success": 3}
    lo, hi = wilson_interval(0, 50)
    assert lo == 0.0 and 0.0 < hi < 0.1


def test_each_episode_is_reported_with_its_seed_and_how_it_ended():
    from robotrl.actor.report import episode_rows, outcome_text, summarize

    env = LineEnv(max_ticks=40, goal=20.0)
    loop, _, _ = make(Strategy.naive_async, ConstantLatency(0.1), env=env)
    reached = loop.run_episode(0, seed=0)
    env.goal = 1e9  # out of reach: the episode runs to its time limit
    timed_out = loop.run_episode(1, seed=8)
    results = [reached, timed_out]
    rows = episode_rows(results)
    assert [(r.episode, r.seed, r.success, r.outcome) for r in rows] == [
        (0, 0, True, "success"),
        (1, 8, False, "timeout"),
    ]
    assert rows[0].success_tick == 21 and rows[1].success_tick is None and rows[1].ticks == 40
    assert rows[0].policy_versions == [0] and rows[0].failure is None
    outcomes = summarize(results, control_hz=30.0, wall_clock=False)["outcomes"]
    assert outcomes == {"success": 1, "timeout": 1}
    assert outcome_text({"timeout": 1, "success": 3}) == "3 success, 1 timeout"
    assert outcome_text({"timeout": 1, "success": 3}, skip="success") == "1 timeout"
    assert outcome_text({"success": 3}, skip="success") == "-"


def test_an_evaluation_with_expert_takeovers_says_its_successes_are_partly_the_expert_s(capsys):
    from robotrl.actor.report import print_summary, summarize, takeover_rows

    env = LineEnv(max_ticks=40, goal=20.0)
    loop, _, _ = make(Strategy.naive_async, ConstantLatency(0.1), env=env)
    summary = summarize([loop.run_episode(0, seed=0)], control_hz=30.0, wall_clock=False)
    assert takeover_rows(summary) == []
    summary["intervention_ticks"] = 37
    (name, text), *_ = takeover_rows(summary)
    assert name == "expert takeover ticks" and text.startswith("37:") and "env.takeover.on_miss=false" in text
    print_summary({**summary, "env": "line", "strategy": "naive_async", "latency": "constant"})
    assert "takeover" in capsys.readouterr().out


def test_rerun_observer_records_ticks_and_chunks(tmp_path):
    from robotrl.viz.rerun import RerunObserver

    observer = RerunObserver(tmp_path / "run.rrd")
    env = LineEnv(max_ticks=20)
    slots = PolicySlots(TickPolicy(horizon=H), TickPolicy(horizon=H))
    cfg = ActorConfig(strategy=Strategy.prefix, virtual_time=True)
    loop = build_loop(env, InProcessInference(slots), cfg, H, ConstantLatency(0.1), observer=observer)
    loop.run_episode(0, seed=0)
    observer.close()
    size = (tmp_path / "run.rrd").stat().st_size
    assert size > 10_000  # 20 ticks of joints and timing plus every chunk's strips


def test_the_prefix_is_handed_over_as_the_robot_will_execute_it_clipped_to_the_bounds():
    """Chunks running past a joint limit are clipped at the arm; the policy, trained on executed
    (clipped) actions, must be conditioned on the clipped prefix, not on the unreachable plan."""
    policy = TickPolicy(horizon=H)  # rows count ticks up: past 20 they are out of bounds
    loop, env, _ = make(
        Strategy.prefix, ConstantLatency(0.1), policy=policy, env=LineEnv(max_ticks=40, high=20.0)
    )
    result = loop.run_episode(0, seed=0)
    given = [p for p in policy.prefixes if p is not None]
    assert result.clamped_ticks > 0 and any(float(p.max()) == 20.0 for p in given)
    assert all(float(p.max()) <= 20.0 for p in given)
    assert max(float(a.max()) for a in env.executed) == 20.0


def test_a_delay_past_half_the_chunk_is_diagnosed_and_a_shorter_one_is_not():
    from robotrl.actor.report import chunk_too_short

    assert chunk_too_short(None, 32, 2) is None  # no chunk measured
    assert chunk_too_short(15.0, 32, 2) is None  # 15 + 2 <= 32 - 15: the plan lasts
    diagnosis = chunk_too_short(18.0, 32, 2)
    assert diagnosis is not None and "policy.horizon (>= 38)" in diagnosis


def test_asking_early_pays_up_to_about_sixty_two_percent_of_the_chunk():
    from robotrl.actor.loop import early_request_pays

    assert all(early_request_pays(d, 32) for d in range(0, 20))  # 19 of 32 ticks: 0.59
    assert not any(early_request_pays(d, 32) for d in range(20, 32))
    assert early_request_pays(4, 8) and not early_request_pays(5, 8)


class ChunkLog:
    """Observer keeping every merged chunk."""

    def __init__(self) -> None:
        self.chunks: list = []

    def on_tick(self, *args: object) -> None: ...

    def on_chunk(self, episode_id: int, chunk) -> None:
        self.chunks.append(chunk)


def test_a_prefix_past_the_plan_commits_the_held_action_and_matches_what_the_arm_executed():
    # One inference at a time, 9 ticks of delay on a 16-step chunk: each chunk leaves 7 new
    # actions, so the next request commits those 7 and then 2 ticks of the arm holding the last.
    horizon = 16
    policy = TickPolicy(horizon=horizon, noise=0.5)
    loop, env, _ = make(
        Strategy.prefix, ConstantLatency(0.3), policy=policy, horizon=horizon, max_in_flight=1
    )
    log = ChunkLog()
    loop.observer = log
    result = loop.run_episode(0, seed=5)
    assert set(result.delays[1:]) == {9} and result.prefix_overruns == 0
    given = [p for p in policy.prefixes if p is not None]
    assert given and all(len(p) == 9 for p in given)
    assert all(np.array_equal(p[6], p[7]) and np.array_equal(p[7], p[8]) for p in given[1:])
    assert result.starved_ticks > 0  # the held ticks
    checked = 0
    for chunk in log.chunks:
        n = min(chunk.prefix_len, len(env.executed) - chunk.obs_tick)
        if n > 0:
            executed = np.array(env.executed[chunk.obs_tick : chunk.obs_tick + n])
            assert np.array_equal(executed, chunk.actions[:n])  # bit-exact: no seam at any switch
            checked += 1
    assert checked >= 3


def test_prefix_waits_like_sync_when_asking_early_would_move_the_arm_less():
    # One inference at a time, 6 ticks of delay on an 8-step chunk: past 0.62 of the chunk,
    # stopping to wait moves the arm more.
    def run(strategy: Strategy) -> list[list[float]]:
        loop, env, _ = make(strategy, ConstantLatency(0.2), policy=TickPolicy(horizon=H), max_in_flight=1)
        loop.run_episode(0, seed=1)
        return [a.tolist() for a in env.executed]

    assert run(Strategy.prefix) == run(Strategy.sync)


@pytest.mark.parametrize("strategy", [Strategy.naive_async, Strategy.blend, Strategy.prefix])
def test_at_zero_delay_every_strategy_executes_what_sync_executes(strategy):
    def run(strategy: Strategy) -> tuple[list[list[float]], int]:
        loop, env, policy = make(strategy, ConstantLatency(0.0), policy=TickPolicy(horizon=H))
        loop.run_episode(0, seed=2)
        return [a.tolist() for a in env.executed], policy.calls

    assert run(strategy) == run(Strategy.sync)


def test_a_steady_delay_needs_no_margin_and_a_varying_one_keeps_it():
    from robotrl.actor.latency import DelayEstimator

    estimator = DelayEstimator(window=5, quantile=0.9, initial_ticks=3)
    assert estimator.varies()  # nothing measured: hedge
    for _ in range(4):
        estimator.record(3)
    assert not estimator.varies()
    estimator.record(4)
    assert estimator.varies()
    for _ in range(5):
        estimator.record(4)
    assert not estimator.varies()  # the window forgot the 3s


def _seamless(log: ChunkLog, executed: list) -> int:
    """Assert every merged chunk's committed rows are what the arm executed at their ticks;
    returns how many chunks had committed rows that ran."""
    checked = 0
    for chunk in log.chunks:
        n = min(chunk.prefix_len, len(executed) - chunk.obs_tick)
        if n > 0:
            ran = np.array(executed[chunk.obs_tick : chunk.obs_tick + n])
            assert np.array_equal(ran, chunk.actions[:n]), chunk.chunk_id
            checked += 1
    return checked


@pytest.mark.parametrize("seconds", [0.2, 0.5, 0.7])  # 6, 15 and 21 ticks of a 24-step chunk
def test_pipelined_prefix_never_starves_up_to_a_horizon_and_each_chunk_continues_what_ran(seconds):
    horizon = 24
    policy = TickPolicy(horizon=horizon, noise=0.5)  # noisy chunks: any seam would show
    loop, env, _ = make(
        Strategy.prefix, ConstantLatency(seconds), policy=policy, horizon=horizon, env=LineEnv(max_ticks=120)
    )
    log = ChunkLog()
    loop.observer = log
    result = loop.run_episode(0, seed=4)
    delay = round(seconds * 30)
    assert result.ticks == 120 and result.starved_ticks == 0 and result.prefix_overruns == 0
    assert set(result.delays[1:]) == {delay}
    assert _seamless(log, env.executed) >= 3


def test_two_inferences_in_flight_commit_the_rows_the_arm_then_executed_bit_exact():
    # 5 ticks of delay on an 8-step chunk: a request every 3 ticks, two in flight at once.
    policy = TickPolicy(horizon=H, noise=1.0)
    loop, env, _ = make(Strategy.prefix, ConstantLatency(5 / 30), policy=policy, env=LineEnv(max_ticks=60))
    log = ChunkLog()
    loop.observer = log
    result = loop.run_episode(0, seed=9)
    assert result.starved_ticks == 0 and result.chunks_merged >= 15
    assert _seamless(log, env.executed) >= 15


def test_one_at_a_time_starves_where_pipelining_does_not():
    def starved(max_in_flight: int) -> int:
        loop, _env, _ = make(Strategy.prefix, ConstantLatency(5 / 30), max_in_flight=max_in_flight)
        return loop.run_episode(0, seed=0).starved_ticks

    assert starved(1) > 0 and starved(0) == 0


def test_a_failed_pipelined_inference_costs_one_error_and_the_next_continues_the_plan():
    policy = TickPolicy(horizon=H, noise=0.5, error_calls=[3])
    loop, env, _ = make(Strategy.prefix, ConstantLatency(5 / 30), policy=policy, env=LineEnv(max_ticks=60))
    log = ChunkLog()
    loop.observer = log
    result = loop.run_episode(0, seed=2)
    assert result.failure is None and result.inference_errors == 1
    assert _seamless(log, env.executed) >= 10
