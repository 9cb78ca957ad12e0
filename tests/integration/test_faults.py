"""Fault injection with real processes and sockets: for each fault, what is kept, dropped and counted.

Each test names the log line a user sees, then audits the learner's buffer (saved in its
checkpoint) or its ledger against what the actors sent.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from fault_peers import TICKS
from waiting import wait_until

from robotrl.learner.journal import LEDGER_FILE
from robotrl.transport.ledger import SeqLedger

PEERS = str(Path(__file__).with_name("fault_peers.py"))


def spawn(*args: str, log: Path | None = None) -> subprocess.Popen[str]:
    err = open(log, "a") if log is not None else subprocess.DEVNULL  # noqa: SIM115 (closed with the process)
    return subprocess.Popen([sys.executable, PEERS, *args], stdout=subprocess.PIPE, stderr=err, text=True)


def latest_checkpoint(run: Path) -> Path | None:
    pointer = run / "checkpoints" / "latest"
    return run / "checkpoints" / pointer.read_text().strip() if pointer.exists() else None


def buffer_rows(checkpoint: Path) -> Counter[tuple[int, int]]:
    """(episode, tick) of every row the saved online buffer holds (next-observation rows excluded)."""
    folder = checkpoint / "buffers" / "online"
    meta = json.loads((folder / "replay.json").read_text())
    cursor = int(meta["cursor"])
    episode = np.load(folder / "episode.npy")[:cursor]
    tick = np.load(folder / "tick.npy")[:cursor]
    return Counter((int(e), int(t)) for e, t in zip(episode, tick, strict=True) if t < TICKS)


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM, timeout_s: float = 60) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
    proc.wait(timeout_s)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_learner_sigkilled_between_checkpoints_restarts_and_holds_every_transition_once(tmp_path):
    run = tmp_path / "run"
    t_end, w_end = f"ipc://{tmp_path}/t.sock", f"ipc://{tmp_path}/w.sock"
    log = tmp_path / "learner.log"
    first = spawn("learner", str(run), t_end, w_end, log=log)
    n = 60
    act = spawn("actor", t_end, "actor-0", "0", str(n), "0.05", str(tmp_path / "spool"))
    second = None
    try:
        # Killed after a checkpoint and with batches acknowledged since (in the journal only).
        wait_until(
            lambda: (
                latest_checkpoint(run) is not None and len(list((run / "journal").glob("*.rrspool"))) >= 3
            ),
            120,
            "a checkpoint and journaled batches after it",
            period_s=0.05,
        )
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        second = spawn("learner", str(run), t_end, w_end, log=log)
        stdout, _ = act.communicate(timeout=180)
        stats = json.loads(stdout.strip().splitlines()[-1])
        stop(second)
    finally:
        for proc in (act, first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
    assert stats["flushed"] and stats["acked"] == n and stats["dropped"] == 0
    text = log.read_text()
    assert "journal: " in text and "received after the last checkpoint restored" in text, text[-3000:]
    final = latest_checkpoint(run)
    assert final is not None
    rows = buffer_rows(final)
    assert [k for k, c in rows.items() if c > 1] == []  # nothing twice
    assert set(rows) == {(e, t) for e in range(n) for t in range(TICKS)}  # nothing lost
    audit = SeqLedger.from_json(json.loads((final / LEDGER_FILE).read_text())).audit()
    assert (audit.received, audit.lost_to_actor_crash, audit.in_flight) == (n, 0, 0)
    assert list((run / "journal").glob("*.rrspool")) == []  # the final checkpoint holds it all


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_actor_sigkilled_and_restarted_resends_its_write_ahead_spool(tmp_path):
    run = tmp_path / "run"
    t_end, w_end = f"ipc://{tmp_path}/t.sock", f"ipc://{tmp_path}/w.sock"
    lrn = spawn("learner", str(run), t_end, w_end, log=tmp_path / "learner.log")
    spool = tmp_path / "spool"
    doomed = spawn("actor", t_end, "actor-0", "0", "1000", "0.02", str(spool))
    again = None
    try:
        wait_until(lambda: latest_checkpoint(run) is not None, 120, "the learner's first checkpoint")
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)
        left = len(list((spool / "actor-0").glob("*.rrspool")))
        again = spawn("actor", t_end, "actor-0", "1000", "5", "0.02", str(spool))
        stdout, _ = again.communicate(timeout=180)
        stats = json.loads(stdout.strip().splitlines()[-1])
        stop(lrn)
    finally:
        for proc in (doomed, again, lrn):
            if proc is not None and proc.poll() is None:
                proc.kill()
    assert stats["flushed"] and list((spool / "actor-0").glob("*.rrspool")) == []
    final = latest_checkpoint(run)
    assert final is not None
    audit = SeqLedger.from_json(json.loads((final / LEDGER_FILE).read_text())).audit()
    # What the dead actor had numbered reached the learner: sent before the kill or resent
    # from its write-ahead spool by the next life. Only batches it never numbered (at most
    # the hand-off queue at the instant of the kill) are outside any ledger.
    assert audit.lost_to_actor_crash == 0 and audit.in_flight == 0
    assert left > 0, "the actor had nothing unacknowledged when killed; nothing was tested"
    rows = buffer_rows(final)
    assert [k for k, c in rows.items() if c > 1] == []
    assert {(e, t) for e in range(1000, 1005) for t in range(TICKS)} <= set(rows)
