"""`robotrl profile-latency` writes a profile that the sim's empirical latency model replays."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
from doubles import LineEnv, TickPolicy
from robotrl.hardware.profile_latency import arm_observations, measure
from robotrl.sim.latency import EmpiricalLatency, build_latency_model, load_profile

from robotrl.actor.compose import build_loop
from robotrl.actor.inference import InProcessInference
from robotrl.actor.latency import seconds_to_ticks
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


def test_arm_observations_have_the_arms_joints_and_camera_shapes():
    spec = LineEnv().spec
    spec = dataclasses.replace(spec, camera_shapes={"front": (48, 64, 3), "wrist": (32, 32, 3)})
    observations = arm_observations(spec, count=3, seed=0)
    low, high = spec.action_bounds()
    for obs in observations:
        assert obs.state.shape == (spec.state_dim,) and obs.state.dtype == np.float32
        assert np.all(obs.state[: spec.action_dim] >= low) and np.all(obs.state[: spec.action_dim] <= high)
        assert {cam: (img.shape, img.dtype) for cam, img in obs.images.items()} == {
            "front": ((48, 64, 3), np.uint8),
            "wrist": ((32, 32, 3), np.uint8),
        }
    assert not np.array_equal(observations[0].images["front"], observations[1].images["front"])


def test_profile_of_a_pixel_policy_on_the_fake_arm_times_frames_of_its_cameras(tmp_path, capsys):
    """`robotrl profile-latency hardware=fake_so101`: the flow policy built for the arm's spec (no arm
    connected) is timed on frames of the configured camera shapes."""
    out = tmp_path / "profile.json"
    code = cli(
        [
            "profile-latency",
            "hardware=fake_so101",
            f"hardware.calibration_dir={tmp_path}",
            "hardware.cameras.front.width=64",
            "hardware.cameras.front.height=48",
            "hardware.cameras.wrist.width=64",
            "hardware.cameras.wrist.height=48",
            "policy=flow_tiny",
            "env.privileged_state=false",
            "profile.samples=6",
            "profile.warmup=1",
            f"profile.output={out}",
        ]
    )
    assert code == 0
    doc = json.loads(out.read_text())
    assert doc["env"] == "lerobot/robotrl_fake_so101" and len(doc["seconds"]) == 6
    assert doc["camera_shapes"] == {"front": [48, 64, 3], "wrist": [48, 64, 3]}
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["p99_ms"] > 0
