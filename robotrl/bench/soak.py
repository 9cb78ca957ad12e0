"""`robotrl bench soak`: a learner and two actors run for a set time while faults hit them on a schedule.

The roles are the real ones (``robotrl learner`` and ``robotrl actor`` as processes:
MuJoCo reach in virtual time, the tiny flow policy, state only), the links real
ZeroMQ over TCP, and each actor reaches the learner through a :class:`TcpProxy` the
bench controls. Faults, each once per cycle: a network partition, the learner SIGKILLed
and restarted from its checkpoint (and write-ahead journal), an actor SIGKILLed and
restarted with the same id (its write-ahead spool resends), the learner frozen
(SIGSTOP, a learner too slow to answer), and a weight update corrupted on the wire.

At the end the actors are stopped (they flush), then the learner (a final checkpoint),
and the bench audits: every actor stream's sequence numbers against the learner's
ledger (saved with its buffers), rows each actor incarnation's transport numbered
(its audit file, plus batches a killed one left in its spool uncounted) against rows the
learner stored, the policy versions every actor executed (never
going back), missed control deadlines, and the resident memory of every role's
process tree over time (flat: the last third against the second).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from robotrl.bench.proxy import TcpProxy
from robotrl.bench.report import report
from robotrl.core import run_folder
from robotrl.learner.journal import LEDGER_FILE
from robotrl.transport.ledger import SeqLedger
from robotrl.transport.sockets import free_endpoint
from robotrl.transport.spool import Spool
from robotrl.wire.messages import message_to_transition_batch

ACTORS = ("actor-0", "actor-1")
COMMON = [
    "policy=flow_tiny",
    "env.cameras=[]",
    "env.max_episode_ticks=60",
    "transport.heartbeat_s=0.2",
    "transport.peer_timeout_s=1.0",
]
LEARNER = [
    "learner.rapi.critic_warmup_updates=5",
    "learner.learning_starts=32",
    "learner.batch_size=32",
    "learner.log_every_groups=5",
    "learner.checkpoint_every_groups=10",
    "learner.save_buffers=true",
    "learner.online_capacity=50000",
    "learner.anchor_capacity=5000",
    "learner.torch_threads=1",
    "learner.max_samples_per_insert=4.0",  # the CPU is shared with the actors
]
PARTITION_S = 3.0
FREEZE_S = 3.0
_pause = threading.Event()  # never set: waiting on it is a pause


def tree_rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its descendants (an actor's inference worker), in MB."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return total / 1024


@dataclass
class Role:
    """One role's process, restarted in place by the faults."""

    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    rss: list[float] = field(default_factory=list)
    """MB, once a second, of the current incarnation (a restarted process starts anew)."""
    longest_rss: list[float] = field(default_factory=list)
    """The samples of the longest-lived incarnation so far (where growth is judged)."""
    peak_mb: float = 0.0
    incarnations: int = 0

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT)
        self.incarnations += 1
        if len(self.rss) > len(self.longest_rss):
            self.longest_rss = self.rss
        self.rss = []

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        assert self.proc is not None
        self.proc.wait(30)

    def stop(self, sig: int, timeout_s: float) -> int | None:
        """Ask the role to stop; SIGKILL it after ``timeout_s``. Its exit code (None: killed)."""
        assert self.proc is not None
        self.signal(sig)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return None


class Soak:
    def __init__(self, root: Path, seconds: float) -> None:
        self.root, self.seconds = root, seconds
        self.run_dir = root / "run"
        self.run_dir.mkdir(parents=True)
        transitions, weights = free_endpoint(), free_endpoint()
        self.proxies = {a: (TcpProxy(transitions), TcpProxy(weights)) for a in ACTORS}
        cli = [sys.executable, "-m", "robotrl.cli"]
        common = [*COMMON, f"run_dir={self.run_dir}", f"transport.spool_dir={root / 'spool'}"]
        self.learner = Role(
            "learner",
            [
                *cli,
                "learner",
                *common,
                *LEARNER,
                f"transport.transitions_endpoint={transitions}",
                f"transport.weights_endpoint={weights}",
            ],
            root / run_folder.role_log_name("learner"),
        )
        self.actors = {
            a: Role(
                a,
                [
                    *cli,
                    "actor",
                    *common,
                    "actor.episodes=0",
                    "actor.audit_sent=true",
                    f"actor.actor_id={a}",
                    f"seed={i}",
                    f"transport.transitions_endpoint={self.proxies[a][0].endpoint}",
                    f"transport.weights_endpoint={self.proxies[a][1].endpoint}",
                ],
                root / run_folder.role_log_name(a),
            )
            for i, a in enumerate(ACTORS)
        }
        self.sent: dict[str, int] = {}  # stream -> rows its transport numbered and kept
        self.last_seq: dict[str, int] = {}  # stream -> the last batch counted in its audit file
        self.versions: list[list[int]] = []  # per actor incarnation: policy version of each episode
        self.missed: dict[str, int] = dict.fromkeys(ACTORS, 0)
        self.faults: list[tuple[float, str]] = []
        self.start_time = 0.0

    # -- what the actors report ----------------------------------------------------------

    def _collect(self, actor: str) -> None:
        """Read an actor incarnation's files before the next one overwrites them."""
        sent = run_folder.read_sent_record(self.run_dir, actor)
        if sent is not None:
            self.sent[sent.stream] = sent.rows
            self.last_seq[sent.stream] = sent.seq
        for stream, (rows, seq) in spooled_rows_after(self.root / "spool" / actor, self.last_seq).items():
            self.sent[stream] = self.sent.get(stream, 0) + rows
            self.last_seq[stream] = seq
        progress = run_folder.read_actor_progress(self.run_dir, actor)
        if progress is not None:
            self.versions.append(progress.versions())
            self.missed[actor] += progress.missed_deadlines
        run_folder.actor_sent_path(self.run_dir, actor).unlink(missing_ok=True)
        run_folder.actor_progress_path(self.run_dir, actor).unlink(missing_ok=True)

    # -- faults ------------------------------------------------------------------------------

    def partition(self) -> None:
        for t, _ in self.proxies.values():
            t.partition()
        _pause.wait(PARTITION_S)
        for t, _ in self.proxies.values():
            t.heal()

    def kill_learner(self) -> None:
        """SIGKILL between two checkpoints: once one exists and batches are journaled after it
        (waits up to 60 s for that on a slow machine), so both recovery paths are exercised."""
        journal = self.run_dir / run_folder.JOURNAL
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline and not (
            run_folder.latest_checkpoint(self.run_dir) is not None and any(journal.glob("*.rrspool"))
        ):
            _pause.wait(0.1)
        self.learner.kill()
        self.learner.start()

    def kill_actor(self) -> None:
        victim = self.actors[ACTORS[0]]
        victim.kill()
        self._collect(victim.name)
        victim.start()

    def freeze_learner(self) -> None:
        self.learner.signal(signal.SIGSTOP)
        _pause.wait(FREEZE_S)
        self.learner.signal(signal.SIGCONT)

    def corrupt_weights(self) -> None:
        """Flip a byte in the middle of the next weight update on its way to actor-1 (inside a
        tensor: the digest catches it)."""
        self.proxies[ACTORS[1]][1].corrupt_next_chunk(8192)

    def schedule(self) -> list[tuple[float, str, Callable[[], None]]]:
        """Each fault once per cycle of 100 s, after a warm-up that lets the learner start."""
        cycle = [
            (20.0, "partition", self.partition),
            (35.0, "learner SIGKILL", self.kill_learner),
            (55.0, "actor SIGKILL", self.kill_actor),
            (70.0, "learner frozen", self.freeze_learner),
            (85.0, "weights corrupted", self.corrupt_weights),
        ]
        out, base = [], 0.0
        while base + 20.0 < self.seconds - 10.0:
            out += [(base + t, name, fn) for t, name, fn in cycle if base + t < self.seconds - 10.0]
            base += 100.0
        return out

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        console = Console(stderr=True)
        self.learner.start()
        for role in self.actors.values():
            role.start()
        self.start_time = time.monotonic()
        pending = self.schedule()
        sampler_stop = threading.Event()
        sampler = threading.Thread(target=self._sample_rss, args=(sampler_stop,), daemon=True)
        sampler.start()
        try:
            while (elapsed := time.monotonic() - self.start_time) < self.seconds:
                if pending and elapsed >= pending[0][0]:
                    _, name, fault = pending.pop(0)
                    console.log(f"soak: t={elapsed:.0f}s fault: {name}")
                    fault()
                    self.faults.append((elapsed, name))
                for role in (self.learner, *self.actors.values()):
                    assert role.proc is not None
                    if role.proc.poll() is not None:
                        tail = "\n".join(Path(role.log).read_text(errors="replace").splitlines()[-40:])
                        raise RuntimeError(
                            f"{role.name} exited ({role.proc.returncode}); {role.log} ends:\n{tail}"
                        )
                _pause.wait(0.2)
            console.log("soak: stopping the actors (they flush), then the learner")
            codes = {a: r.stop(signal.SIGINT, 60) for a, r in self.actors.items()}
            for actor in ACTORS:
                self._collect(actor)
            learner_code = self.learner.stop(signal.SIGTERM, 120)
        finally:
            sampler_stop.set()
            for role in (*self.actors.values(), self.learner):
                if role.proc is not None and role.proc.poll() is None:
                    role.kill()
            for t, w in self.proxies.values():
                t.close()
                w.close()
        return self.audit(codes, learner_code)

    def _sample_rss(self, stop: threading.Event) -> None:
        while not stop.wait(1.0):
            for role in (self.learner, *self.actors.values()):
                if role.proc is not None and role.proc.poll() is None:
                    mb = tree_rss_mb(role.proc.pid)
                    role.rss.append(mb)
                    role.peak_mb = max(role.peak_mb, mb)

    def audit(self, codes: dict[str, int | None], learner_code: int | None) -> dict[str, Any]:
        ckpt = run_folder.latest_checkpoint(self.run_dir)
        assert ckpt is not None, "the learner wrote no checkpoint"
        counters = json.loads((ckpt / run_folder.CHECKPOINT_COUNTERS).read_text())
        ledger = SeqLedger.from_json(json.loads((ckpt / LEDGER_FILE).read_text()))
        audit = ledger.audit()
        sent = sum(self.sent.values())
        stored = int(counters["transitions"])
        monotonic = all(all(a <= b for a, b in itertools.pairwise(v)) for v in self.versions)
        growth = {r.name: _growth(max(r.rss, r.longest_rss, key=len)) for r in self._roles()}
        return {
            "bench": "soak",
            "seconds": round(self.seconds),
            "faults_injected": len(self.faults),
            "fault_times_s": {name: round(t, 1) for t, name in self.faults},
            "transitions_sent": sent,
            "transitions_stored": stored,
            "transitions_lost": max(0, sent - stored),
            "batches_lost_to_actor_crash": audit.lost_to_actor_crash,
            "batches_dropped_by_actor": audit.dropped_by_actor,
            "batches_in_flight_at_end": audit.in_flight,
            "batches_received": audit.received,
            "duplicates": max(0, stored - sent),
            "duplicate_arrivals_refused": audit.duplicates,
            "policy_versions_monotonic": monotonic,
            "policy_version_max": max((max(v, default=-1) for v in self.versions), default=-1),
            "max_missed_deadlines": max(self.missed.values()),
            "peak_rss_mb": round(max(r.peak_mb for r in self._roles()), 1),
            "rss_growth_mb": {k: round(v, 1) for k, v in growth.items()},
            "log_lines": self._log_lines(),
            "weight_bytes_corrupted": sum(w.corruptions for _, w in self.proxies.values()),
            "exit_codes": {**codes, "learner": learner_code},
        }

    def _log_lines(self) -> dict[str, int]:
        """How often each role's log says what a user should see after each fault."""
        logs = {r.name: r.log.read_text(errors="replace") for r in self._roles()}
        actors = "".join(logs[a] for a in ACTORS)
        return {
            "actor: learner silent, reconnecting": actors.count("learner silent for"),
            "actor: weights refused, old kept": actors.count("refused update"),
            "learner: resumed from checkpoint": logs["learner"].count("resumed from"),
            "learner: journal restored": logs["learner"].count("received after the last checkpoint restored"),
        }

    def _roles(self) -> list[Role]:
        return [self.learner, *self.actors.values()]


def spooled_rows_after(spool_dir: Path, last_seq: dict[str, int]) -> dict[str, tuple[int, int]]:
    """Per stream, the rows and the last sequence number of the batches a stopped actor left
    in its spool that no audit file counts (numbered after ``last_seq[stream]``, or of a
    stream never named).

    A killed actor can die between writing a batch to its spool and counting it in its
    audit file; the next incarnation sends that batch, so it counts as handed over."""
    found: dict[str, tuple[int, int]] = {}
    if not spool_dir.is_dir():
        return found
    spool = Spool(spool_dir, max_bytes=1 << 62)
    for path in spool.files():
        loaded = spool.load(path)
        if loaded is None:
            continue
        message = loaded[1]
        stream = str(message.meta.get("stream"))
        if message.seq > last_seq.get(stream, -1):
            rows, seq = found.get(stream, (0, -1))
            found[stream] = (rows + len(message_to_transition_batch(message)), max(seq, message.seq))
    return found


def _growth(samples: list[float]) -> float:
    """Mean RSS of the last third minus that of the middle third of one incarnation (its first
    third is start-up)."""
    if len(samples) < 6:
        return 0.0
    n = len(samples) // 3
    mid, last = samples[n : 2 * n], samples[2 * n :]
    return sum(last) / len(last) - sum(mid) / len(mid)


def run(quick: bool = False) -> dict[str, Any]:
    seconds = 110.0 if quick else 600.0
    keep = os.environ.get("ROBOTRL_SOAK_DIR")  # keep the run folder and logs there
    with tempfile.TemporaryDirectory(prefix="robotrl-soak-") as tmp:
        root = Path(keep) if keep else Path(tmp)
        result = Soak(root, seconds).run()
    nested = ("bench", "rss_growth_mb", "exit_codes", "log_lines", "fault_times_s")
    rows = [[k, v] for k, v in result.items() if k not in nested]
    rows += [[f"rss growth {k}, longest incarnation (MB)", v] for k, v in result["rss_growth_mb"].items()]
    rows += [[f"log: {k}", v] for k, v in result["log_lines"].items()]
    rows += [[f"exit code {k}", v] for k, v in result["exit_codes"].items()]
    rows += [[f"fault at {t} s", k] for k, t in result["fault_times_s"].items()]
    report(f"soak: learner + 2 actors, {seconds:.0f} s with faults", ["measure", "value"], rows, result)
    return result
