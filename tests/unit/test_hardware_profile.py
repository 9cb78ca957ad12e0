"""`robotrl profile-latency` writes a profile that the sim's empirical latency model replays."""

from __future__ import annotations

import json

import numpy as np
from doubles import LineEnv, TickPolicy
from robotrl.hardware.profile_latency import measure
from robotrl.sim.latency import EmpiricalLatency, build_latency_model, load_profile

from robotrl.actor.inference import InProcessInference
from robotrl.actor.latency import seconds_to_ticks
from robotrl.actor.main import build_loop
from robotrl.actor.slots import PolicySlots
from robotrl.cli import main as cli
from robotrl.config.actor import ActorConfig, Strategy
from robotrl.config.latency import LatencyConfig, LatencyKind


def test_warm_up_inferences_are_not_timed():
    policy = TickPolicy(horizon=8, action_dim=2)
    obs = LineEnv().reset(seed=0)
    seconds = measure(policy, [obs], samples=5, warmup=3, delay=2)
    assert len(seconds) == 5 and policy.calls == 8
    assert all(p is not None and p.shape == (2, 2) for p in policy.prefixes)


def test_profile_round_trips_into_the_sims_empirical_latency_model(tmp_path, capsys):
    out = tmp_path / "profile.json"
    code = cli(
        [
            "profile-latency",
            "policy=flow_tiny",
            "env.cameras=[]",
            "profile.samples=12",
            "profile.warmup=2",
            f"profile.output={out}",
        ]
    )
    assert code == 0
    doc = json.loads(out.read_text())
    assert doc["version"] == 1 and len(doc["seconds"]) == 12 and doc["warmup"] == 2
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["samples"] == 12 and last["p50_ms"] > 0

    measured = load_profile(out)
    assert measured == tuple(doc["seconds"])
    model = build_latency_model(LatencyConfig(kind=LatencyKind.empirical, profile_path=str(out)))
    assert isinstance(model, EmpiricalLatency)
    rng = np.random.default_rng(0)
    assert {model.sample_seconds(rng) for _ in range(200)} <= set(measured)

    # A virtual-time episode under the profile: every delay is one the machine produced.
    cfg = ActorConfig(strategy=Strategy.naive_async, virtual_time=True)
    slots = PolicySlots(TickPolicy(horizon=8), TickPolicy(horizon=8))
    loop = build_loop(LineEnv(max_ticks=60), InProcessInference(slots), cfg, 8, model, max_prefix=7)
    result = loop.run_episode(0, seed=0)
    possible = {seconds_to_ticks(s, 30.0) for s in measured}
    assert result.delays[1:] and set(result.delays[1:]) <= possible
