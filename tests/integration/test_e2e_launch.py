"""`robotrl launch`: a learner and two actors as real processes over ipc endpoints.

Checks what a user relies on: transitions arrive at the learner, weights move from the
learner into the actors (the policy version the actors execute rises above 0), one log
per role, a crashed actor is restarted, and SIGINT stops everything with no orphan.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from waiting import wait_until

TINY = [
    "policy=flow_tiny",
    "env.cameras=[]",
    "env.max_episode_ticks=60",
    "learner.rapi.critic_warmup_updates=5",
    "learner.learning_starts=32",
    "learner.batch_size=32",
    "learner.log_every_groups=1",
    "learner.checkpoint_every_groups=1000",
    "launch.actors=2",
    "launch.status_every_s=0.5",
    "launch.restart_backoff_s=0.2",
    "launch.learner_threads=1",  # no OpenMP oversubscription on a small shared CPU
]


def _endpoints(tmp: Path) -> list[str]:
    return [
        f"transport.transitions_endpoint=ipc://{tmp}/t.sock",
        f"transport.weights_endpoint=ipc://{tmp}/w.sock",
        f"transport.spool_dir={tmp}/spool",
        f"run_dir={tmp}/run",
    ]


def _launch(tmp: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "robotrl.cli", "launch", *TINY, *_endpoints(tmp), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _status(run: Path) -> dict[str, dict]:
    try:
        return {r["role"]: r for r in json.loads((run / "launch_status.json").read_text())["roles"]}
    except (OSError, ValueError, KeyError):
        return {}


def _wait_for(predicate, timeout_s: float, proc: subprocess.Popen[str], what: str) -> None:
    def still_running() -> None:
        if proc.poll() is not None:
            pytest.fail(
                f"launch exited ({proc.returncode}) while waiting for {what}:\n{proc.stdout.read()[-4000:]}"
            )

    try:
        wait_until(predicate, timeout_s, what, period_s=0.2, on_wait=still_running)
    except AssertionError:
        proc.kill()
        pytest.fail(f"timed out waiting for {what}:\n{proc.communicate()[0][-4000:]}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_launch_runs_learner_and_two_actors_and_weights_reach_the_actors(tmp_path: Path):
    # Everything runs until stopped; Ctrl-C comes once both actors executed published weights.
    # (Ending on the learner's budget is decided by Launch._finished: tests/unit/test_launch_rules.py;
    # here it would race an actor still starting up against the learner's last group.)
    run = tmp_path / "run"
    proc = _launch(tmp_path, "actor.episodes=0", "learner.max_groups=0")
    try:
        _wait_for(
            lambda: all(
                _status(run).get(a, {}).get("progress", {}).get("policy_version", -1) >= 1
                for a in ("actor-0", "actor-1")
            ),
            400,
            proc,
            "both actors to execute weights the learner published (policy version >= 1)",
        )
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=200)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out[-4000:]
    for role in ("learner", "actor-0", "actor-1"):
        assert (run / "logs" / f"{role}.log").stat().st_size > 0
    summaries = [json.loads((run / f"actor_actor-{i}_summary.json").read_text()) for i in (0, 1)]
    progress = [json.loads((run / f"actor_actor-{i}_progress.json").read_text()) for i in (0, 1)]
    assert all(p["episodes"] >= 1 and p["policy_version"] >= 1 for p in progress)
    for s in summaries:
        # The actors stopped first, while the learner still acknowledged: nothing left unsent.
        assert s["transport"]["dropped"] == 0 and s["transport"]["flushed"], s["transport"]
    latest = (run / "checkpoints" / "latest").read_text()
    counters = json.loads((run / "checkpoints" / latest / "counters.json").read_text())
    assert counters["groups"] > 0 and counters["policy_version"] >= 1
    assert counters["transitions"] == sum(s["ticks"] for s in summaries)
    status = _status(run)
    assert all(r["state"] in ("done", "stopped") for r in status.values()), status


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_killed_actor_is_restarted_and_sigint_stops_every_process(tmp_path: Path):
    run = tmp_path / "run"
    proc = _launch(tmp_path, "actor.episodes=0", "learner.max_groups=0")
    try:
        _wait_for(
            lambda: _status(run).get("actor-0", {}).get("progress", {}).get("episodes", 0) >= 1,
            300,
            proc,
            "actor-0's first episode",
        )
        victim = _status(run)["actor-0"]["pid"]
        os.kill(victim, signal.SIGKILL)
        _wait_for(
            lambda: (
                _status(run).get("actor-0", {}).get("restarts") == 1
                and _status(run)["actor-0"]["state"] == "running"
            ),
            60,
            proc,
            "actor-0's restart",
        )
        _wait_for(
            lambda: _status(run).get("learner", {}).get("progress", {}).get("version", 0) >= 1,
            300,
            proc,
            "the learner's first published weights",
        )
        pids = [r["pid"] for r in _status(run).values()]
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=200)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out[-4000:]  # stopped cleanly, but interrupted
    assert not [p for p in [*pids, victim] if _alive(p)], "a role outlived launch"
    status = _status(run)
    assert status["actor-0"]["restarts"] == 1
    assert all(r["state"] in ("done", "stopped") for r in status.values()), status
    assert "shutting down" in out
    # The learner stopped after the actors: its checkpoint holds what they flushed.
    assert (run / "checkpoints" / "latest").exists()
