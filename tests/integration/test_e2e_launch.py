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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from waiting import pid_alive, wait_until

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


@contextmanager
def _launched(tmp: Path, *extra: str) -> Iterator[subprocess.Popen[str]]:
    """`robotrl launch` with every role running until stopped; killed if the test leaves it running."""
    endless = ("actor.episodes=0", "learner.max_groups=0")
    proc = subprocess.Popen(
        [sys.executable, "-m", "robotrl.cli", "launch", *TINY, *_endpoints(tmp), *endless, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()


def _interrupt(proc: subprocess.Popen[str]) -> str:
    """Ctrl-C to launch, as a user would press it; all launch printed once it exited."""
    proc.send_signal(signal.SIGINT)
    return proc.communicate(timeout=200)[0]


def _status(run: Path) -> dict[str, dict]:
    try:
        return {r["role"]: r for r in json.loads((run / "launch_status.json").read_text())["roles"]}
    except (OSError, ValueError, KeyError):
        return {}


def _progress(run: Path, role: str, figure: str) -> int:
    """A figure of the role's last progress report in launch's status file; -1 before there is one."""
    return _status(run).get(role, {}).get("progress", {}).get(figure, -1)


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


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize(("ranks", "shard"), [(1, False), (2, False), (2, True)], ids=["1", "2", "2-sharded"])
def test_launch_runs_learner_and_two_actors_and_weights_reach_the_actors(
    tmp_path: Path, ranks: int, shard: bool
):
    # Everything runs until stopped; Ctrl-C comes once both actors executed published weights.
    # (Ending on the learner's budget is decided by Launch._finished: tests/unit/test_launch_rules.py;
    # here it would race an actor still starting up against the learner's last group.)
    # With two ranks the learner is torchrun's two processes, rank 0 alone on the links; sharded,
    # every publish and the last checkpoint gather the policy from both.
    run = tmp_path / "run"
    with _launched(
        tmp_path, f"launch.learner_ranks={ranks}", f"learner.shard_policy={str(shard).lower()}"
    ) as proc:
        _wait_for(
            lambda: all(_progress(run, a, "policy_version") >= 1 for a in ("actor-0", "actor-1")),
            400,
            proc,
            "both actors to execute weights the learner published (policy version >= 1)",
        )
        out = _interrupt(proc)
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
    for p in progress:  # one version sequence, published by rank 0 alone
        versions = [v for _, v in p["history"]]
        assert versions == sorted(versions), versions
    status = _status(run)
    assert all(r["state"] in ("done", "stopped") for r in status.values()), status
    learner_log = (run / "logs" / "learner.log").read_text()
    assert (f"x {ranks} ranks" in learner_log) == (ranks > 1)
    assert ("the policy sharded" in learner_log) == shard
    assert ("rank 1: stopped after" in learner_log) == (ranks > 1)
    assert (run / "logs" / "torchrun").is_dir() == (ranks > 1)  # torchrun's files, not in /tmp


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_killed_actor_is_restarted_and_sigint_stops_every_process(tmp_path: Path):
    run = tmp_path / "run"
    with _launched(tmp_path) as proc:
        _wait_for(lambda: _progress(run, "actor-0", "episodes") >= 1, 300, proc, "actor-0's first episode")
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
            lambda: _progress(run, "learner", "policy_version") >= 1,
            300,
            proc,
            "the learner's first published weights",
        )
        pids = [r["pid"] for r in _status(run).values()]
        out = _interrupt(proc)
    assert proc.returncode == 130, out[-4000:]  # stopped cleanly, but interrupted
    assert not [p for p in [*pids, victim] if pid_alive(p)], "a role outlived launch"
    status = _status(run)
    assert status["actor-0"]["restarts"] == 1
    assert all(r["state"] in ("done", "stopped") for r in status.values()), status
    assert "shutting down" in out
    # The learner stopped after the actors: its checkpoint holds what they flushed.
    assert (run / "checkpoints" / "latest").exists()


def _rank_pid(torchrun_pid: int, rank: int) -> int | None:
    """The pid of torchrun's child that runs learner rank ``rank`` (its RANK variable)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            env = (entry / "environ").read_bytes().split(b"\0") if parent == torchrun_pid else []
        except (OSError, ValueError, IndexError):
            continue
        if f"RANK={rank}".encode() in env:
            return int(entry.name)
    return None


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_killed_learner_rank_restarts_the_learner_and_loses_no_transition(tmp_path: Path):
    run = tmp_path / "run"
    with _launched(tmp_path, "launch.learner_ranks=2") as proc:
        _wait_for(lambda: _progress(run, "learner", "policy_version") >= 1, 300, proc, "the first weights")
        follower = _rank_pid(_status(run)["learner"]["pid"], 1)
        assert follower is not None, "no learner rank 1 among torchrun's children"
        os.kill(follower, signal.SIGKILL)
        _wait_for(
            lambda: (
                _status(run)["learner"].get("restarts") == 1 and _status(run)["learner"]["state"] == "running"
            ),
            120,
            proc,
            "the learner's restart",
        )
        # The progress is the metrics file's last line: the killed session's until the new one
        # reports, so wait for the new session to have stored rows the actors resent or sent since.
        killed = _progress(run, "learner", "transitions")
        _wait_for(
            lambda: _progress(run, "learner", "transitions") > killed + 64,
            300,
            proc,
            "the new session to store the actors' transitions",
        )
        out = _interrupt(proc)
    assert proc.returncode == 130, out[-4000:]
    summaries = [json.loads((run / f"actor_actor-{i}_summary.json").read_text()) for i in (0, 1)]
    latest = (run / "checkpoints" / "latest").read_text()
    counters = json.loads((run / "checkpoints" / latest / "counters.json").read_text())
    log = (run / "logs" / "learner.log").read_text()
    # Every row the actors sent is stored once: the killed session's from its journal.
    why = f"{[s['transport'] for s in summaries]}, checkpoints {sorted(os.listdir(run / 'checkpoints'))}"
    assert counters["transitions"] == sum(s["ticks"] for s in summaries), f"{why}\n{log[-6000:]}"
    assert "a collective with the other 1 rank(s) failed" in log, log[-4000:]  # rank 0 says why
    assert "rank      : 1" in log and "SIGKILL" in log, log[-4000:]  # torchrun names the rank that died
