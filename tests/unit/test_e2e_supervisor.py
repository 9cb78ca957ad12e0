"""The launch supervisor with small real child processes: restarts, give-up, stop order, logs."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
from waiting import pid_alive, wait_until

from robotrl.launch.supervisor import RoleSpec, State, Supervisor


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _poll_until(sup: Supervisor, predicate, timeout_s: float = 20.0) -> None:
    wait_until(predicate, timeout_s, "the supervised roles to reach the expected state", on_wait=sup.poll)


def test_a_crashing_role_is_restarted_then_given_up_and_its_log_keeps_every_run(tmp_path: Path):
    log = tmp_path / "logs" / "crasher.log"
    spec = RoleSpec("crasher", _python("print('ran', flush=True); raise SystemExit(7)"), log)
    events: list[str] = []
    sup = Supervisor([spec], max_restarts=2, backoff_s=0.01, on_event=events.append)
    sup.start()
    _poll_until(sup, lambda: sup.states()["crasher"] is State.failed)
    child = sup.children["crasher"]
    assert child.restarts == 2 and child.last_exit == 7
    assert log.read_text().splitlines().count("ran") == 3  # first run and two restarts, appended
    assert any("giving up" in e for e in events)


def test_a_role_that_exits_zero_is_done_and_not_restarted(tmp_path: Path):
    sup = Supervisor([RoleSpec("ok", _python("pass"), tmp_path / "ok.log")], max_restarts=3, backoff_s=0.01)
    sup.start()
    _poll_until(sup, lambda: sup.states()["ok"] is State.done)
    assert sup.children["ok"].restarts == 0


def test_a_killed_role_counts_as_crashed_and_comes_back(tmp_path: Path):
    ready = tmp_path / "ready"
    code = f"import pathlib, time; pathlib.Path({str(ready)!r}).touch(); time.sleep(60)"
    sup = Supervisor([RoleSpec("sleeper", _python(code), tmp_path / "s.log")], max_restarts=1, backoff_s=0.01)
    sup.start()
    first = sup.children["sleeper"].pid
    assert first is not None
    _poll_until(sup, ready.exists)
    os.kill(first, signal.SIGKILL)
    _poll_until(sup, lambda: sup.children["sleeper"].restarts == 1)
    assert sup.children["sleeper"].pid != first
    sup.stop(["sleeper"], timeout_s=10)
    assert not pid_alive(first)


def test_stop_sends_sigint_and_kills_a_role_that_ignores_it(tmp_path: Path):
    polite_done, ready_p, ready_s = tmp_path / "polite_done", tmp_path / "ready_p", tmp_path / "ready_s"
    polite = (
        "import signal, time, pathlib\n"
        f"signal.signal(signal.SIGINT, lambda *_: (pathlib.Path({str(polite_done)!r}).touch(), exit(0)))\n"
        f"pathlib.Path({str(ready_p)!r}).touch()\n"
        "time.sleep(60)"
    )
    stubborn = (
        "import signal, time, pathlib\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        f"pathlib.Path({str(ready_s)!r}).touch()\ntime.sleep(60)"
    )
    sup = Supervisor(
        [
            RoleSpec("polite", _python(polite), tmp_path / "p.log"),
            RoleSpec("stubborn", _python(stubborn), tmp_path / "st.log"),
        ],
        max_restarts=0,
    )
    sup.start()
    _poll_until(sup, lambda: ready_p.exists() and ready_s.exists())  # both handlers installed
    sup.stop(["polite"], timeout_s=10)
    assert polite_done.exists() and sup.states()["polite"] is State.done
    assert sup.states()["stubborn"] is State.running
    pid = sup.children["stubborn"].pid
    assert pid is not None
    sup.stop(["stubborn"], timeout_s=0.5)
    assert not pid_alive(pid)
    assert sup.children["stubborn"].last_exit == -signal.SIGKILL


def test_role_names_must_be_unique(tmp_path: Path):
    with pytest.raises(ValueError, match="unique"):
        Supervisor([RoleSpec("a", ["true"], tmp_path / "a"), RoleSpec("a", ["true"], tmp_path / "b")])


def test_an_actors_status_line_names_episodes_taken_over_only_when_there_are_any():
    from robotrl.launch.status import describe_progress

    plain = {"episodes": 12, "successes": 7, "policy_version": 3, "backlog": 0}
    assert describe_progress("actor-0", plain) == "episodes 12  success 7  executing v3  backlog 0"
    helped = describe_progress("actor-0", {**plain, "taken_over": 4})
    assert helped == "episodes 12  success 7  taken over 4  executing v3  backlog 0"
