"""`robotrl bench soak`: a learner and two actors run for a set time while faults hit them on a schedule.

The roles are the real ones (``robotrl actor`` and the `robotrl learner` role through
:mod:`robotrl.bench.soak_learner`, which only adds two signal-driven fault hooks) as
processes, on the learner's default configuration (no durability override: the JSON's
``default_config`` says whether one was passed through ``ROBOTRL_SOAK_OVERRIDES``),
with CURVE on (keys written by `robotrl keys generate` into the bench's folder) and the
env's two 96x96 cameras. Links are real ZeroMQ over TCP; each actor reaches the learner
through a :class:`TcpProxy` the bench controls. The first actor maps weights from shared
memory, as an actor on the learner's host does by default (only their announcements cross
its proxy); the second stands for an actor on another host: its weights cross its proxy as
pieces (``transport.weights_shared_memory=false``), where one fault corrupts them.

Eleven fault kinds (:class:`robotrl.bench.soak_faults.Faults`), each once per cycle: a
partition, the learner SIGKILLed and restarted from its checkpoint, an actor SIGKILLed
and restarted, the learner frozen (SIGSTOP), a weight update corrupted on the wire, a
peer flooding made-up identities, oversized and over-fragmented messages, a second
process with an actor's id, the journal's disk full then a SIGKILL, one NaN update, and
the learner restarted without a checkpoint (a new session).

At the end the actors are stopped (they flush), then the learner (a final checkpoint),
and :mod:`robotrl.bench.soak_audit` checks: rows every actor incarnation numbered against
rows the learner sessions stored, their ledgers, policy versions monotonic per session,
missed deadlines outside fault windows, flat memory, and each fault's own outcome.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from robotrl.bench import soak_audit as audit
from robotrl.bench.proxy import TcpProxy
from robotrl.bench.report import report
from robotrl.bench.soak_faults import Faults, Role, tree_memory_mb
from robotrl.config.transport import TransportConfig
from robotrl.core import run_folder
from robotrl.transport.sockets import free_endpoint
from robotrl.transport.spool import Spool
from robotrl.wire.messages import message_to_transition_batch

ACTORS = ("actor-0", "actor-1")
HOSTILE = "hostile"
CAMERAS = ("front", "wrist")
IMAGE_SIZE = 96
COMMON = [
    "policy=flow_tiny",
    f"env.cameras=[{','.join(CAMERAS)}]",
    f"env.image_size={IMAGE_SIZE}",
    "env.max_episode_ticks=60",
    "transport.heartbeat_s=0.2",
    "transport.peer_timeout_s=1.0",
    "transport.curve=true",
    # Two cameras make a batch ~3.6 MB: 16 in memory (58 MB), the rest of an outage's backlog
    # waits in the spool on disk, as a camera actor should be configured.
    "transport.max_inflight_batches=16",
]
LEARNER = [  # speed and size only: nothing here touches what survives a crash
    "learner.rapi.critic_warmup_updates=5",
    "learner.learning_starts=32",
    "learner.batch_size=32",
    "learner.log_every_groups=5",
    "learner.checkpoint_every_groups=10",
    "learner.online_capacity=1000",  # rows with two cameras: the buffer fills early, memory then flat
    "learner.anchor_capacity=250",
    "learner.torch_threads=1",
    "learner.max_samples_per_insert=4.0",  # the CPU is shared with the actors
]
DURABILITY_KEYS = (
    "learner.save_buffers",
    "learner.resume",
    "transport.write_ahead",
    "transport.spool_max_mb",
)
"""Overrides that change what survives a crash (so does any key naming a journal or fsync)."""
CYCLE: tuple[tuple[float, str], ...] = (
    (25.0, "partition"),
    (35.0, "learner_sigkill"),
    (47.0, "actor_sigkill"),
    (57.0, "learner_frozen"),
    (66.0, "weights_corrupted"),
    (74.0, "identity_flood"),
    (84.0, "oversized_messages"),
    (95.0, "twin_actor_id"),
    (110.0, "nan_update"),
    (155.0, "journal_disk_full"),
    (165.0, "learner_restart_without_checkpoint"),
)
"""Each fault's time in a cycle; the first 25 s let the learner start and checkpoint, and the NaN
update gets 45 s to be recovered from before the next fault restarts the learner."""
CYCLE_S = 190.0
QUICK_S = 245.0
FULL_S = 800.0
LAST_FAULT_MARGIN_S = 75.0
"""No fault this close to the end (the run is extended when the last one ends late): its check
(a new session's policy reaching the actors) needs a learner start and a publish."""
MIN_GAP_S = 5.0
FOLLOW_UP_S = {"nan_update": 45.0}
"""Seconds after a fault before the next one, where its check needs the learner left alone."""
_pause = threading.Event()  # never set: waiting on it is a pause


def is_durability_override(override: str) -> bool:
    key = override.split("=", 1)[0]
    return key in DURABILITY_KEYS or "journal" in key or "fsync" in key


class Soak:
    def __init__(self, root: Path, seconds: float, overrides: list[str]) -> None:
        self.root, self.seconds, self.overrides = root, seconds, overrides
        self.run_dir = root / "run"
        self.run_dir.mkdir(parents=True)
        self.keys = root / "keys"
        cli = [sys.executable, "-m", "robotrl.cli"]
        # One pair per actor, and one for the hostile peer (an authorized key that lies about ids).
        actors = ",".join([*ACTORS, HOSTILE])
        subprocess.run(
            [*cli, "keys", "generate", "--dir", str(self.keys), "--actors", actors],
            check=True,
            capture_output=True,
        )
        self.transitions_endpoint, weights = free_endpoint(), free_endpoint()
        self.proxies = {a: (TcpProxy(self.transitions_endpoint), TcpProxy(weights)) for a in ACTORS}
        self.actor_ids = ACTORS
        common = [*COMMON, f"run_dir={self.run_dir}", f"transport.spool_dir={root / 'spool'}"]
        learner_argv = [
            *common,
            *LEARNER,
            f"transport.keys_dir={self.keys}",
            f"transport.transitions_endpoint={self.transitions_endpoint}",
            f"transport.weights_endpoint={weights}",
            *overrides,
        ]
        self.learner = Role(
            "learner",
            [sys.executable, "-m", "robotrl.bench.soak_learner", *learner_argv],
            root / run_folder.role_log_name("learner"),
        )
        self.actors = {a: self._actor_role(a, a, i, self.run_dir) for i, a in enumerate(ACTORS)}
        self.twins = 0
        self.faults = Faults(self)
        self.sent: dict[str, int] = {}  # stream -> rows its transport numbered and kept
        self.last_seq: dict[str, int] = {}  # stream -> the last batch counted in its audit file
        self.versions: list[list[int]] = []  # per actor incarnation: policy version of each episode
        self.samples: list[audit.Sample] = []
        self.ticks = 0
        self.unexpected_exits: list[str] = []
        self.learner_exits: list[float] = []
        self.start_time = 0.0

    def _actor_role(self, name: str, actor_id: str, seed: int, run_dir: Path) -> Role:
        proxies = self.proxies[actor_id]
        argv = [
            *COMMON,
            f"run_dir={run_dir}",
            f"transport.spool_dir={self.root / 'spool'}",
            f"transport.keys_dir={self.keys}",
            "actor.episodes=0",
            "actor.audit_sent=true",
            f"actor.actor_id={actor_id}",
            f"seed={seed}",
            f"transport.transitions_endpoint={proxies[0].endpoint}",
            f"transport.weights_endpoint={proxies[1].endpoint}",
            *(["transport.weights_shared_memory=false"] if actor_id == ACTORS[1] else []),
        ]
        cli = [sys.executable, "-m", "robotrl.cli", "actor"]
        return Role(name, [*cli, *argv], self.root / run_folder.role_log_name(name))

    def twin_role(self) -> Role:
        """A new process with the second actor's id, spool folder and key (its own run folder,
        so its audit files stay apart)."""
        self.twins += 1
        twin_dir = self.root / f"twin-{self.twins}"
        twin_dir.mkdir()
        return self._actor_role(f"{ACTORS[1]}-twin-{self.twins}", ACTORS[1], 100 + self.twins, twin_dir)

    def peer_keys(self) -> Any:
        from robotrl.wire.auth import client_keys

        return client_keys(self.keys, HOSTILE)

    def clock(self) -> float:
        return time.monotonic() - self.start_time

    # -- what the actors report ----------------------------------------------------------

    def collect(self, actor: str, run_dir: Path | None = None, name: str | None = None) -> None:
        """Read an actor incarnation's files before the next one overwrites them."""
        run_dir = run_dir or self.run_dir
        sent = run_folder.read_sent_record(run_dir, actor)
        if sent is not None:
            self.sent[sent.stream] = sent.rows
            self.last_seq[sent.stream] = sent.seq
        for stream, (rows, seq) in spooled_rows_after(self.root / "spool" / actor, self.last_seq).items():
            self.sent[stream] = self.sent.get(stream, 0) + rows
            self.last_seq[stream] = seq
        progress = run_folder.read_actor_progress(run_dir, actor)
        if progress is not None:
            self.versions.append(progress.versions())
            self.ticks += progress.ticks
            if name is None:
                self._note_progress(actor, self.actors[actor], progress)
        run_folder.actor_sent_path(run_dir, actor).unlink(missing_ok=True)
        run_folder.actor_progress_path(run_dir, actor).unlink(missing_ok=True)

    def collect_twin(self, twin: Role) -> None:
        self.collect(ACTORS[1], self.root / f"twin-{self.twins}", twin.name)

    # -- the run ---------------------------------------------------------------------------

    def schedule(self) -> list[tuple[float, str]]:
        """Each fault once per cycle, while the run has time for the fault and its check."""
        out, base = [], 0.0
        end = self.seconds - LAST_FAULT_MARGIN_S
        while base + CYCLE[0][0] < end:
            out += [(base + t, name) for t, name in CYCLE if base + t < end]
            base += CYCLE_S
        return out

    def run(self) -> dict[str, Any]:
        console = Console(stderr=True)
        cameras = camera_cost()
        self.learner.start()
        for role in self.actors.values():
            role.start()
        self.start_time = time.monotonic()
        pending = self.schedule()
        sampler_stop = threading.Event()
        sampler = threading.Thread(target=self._sample, args=(sampler_stop,), daemon=True)
        sampler.start()
        try:
            end = self.seconds
            while self.clock() < end:
                if pending and self.clock() >= pending[0][0]:
                    _, name = pending.pop(0)
                    console.log(f"soak: t={self.clock():.0f}s fault: {name}")
                    done = self.faults.inject(name).end
                    if pending:  # a late fault (a slow machine) pushes the next one back
                        gap = FOLLOW_UP_S.get(name, MIN_GAP_S)
                        pending[0] = (max(pending[0][0], done + gap), pending[0][1])
                    else:
                        end = max(end, done + LAST_FAULT_MARGIN_S)
                self._restart_exited()
                _pause.wait(0.2)
            console.log("soak: stopping the actors (they flush), then the learner")
            codes = {a: r.stop(signal.SIGINT, 60) for a, r in self.actors.items()}
            for actor in ACTORS:
                self.collect(actor)
            learner_code = self.learner.stop(signal.SIGTERM, 120)
        finally:
            sampler_stop.set()
            for role in self._roles():
                if role.alive():
                    role.kill()
            for t, w in self.proxies.values():
                t.close()
                w.close()
        return self.audit(codes, learner_code, cameras)

    def _restart_exited(self) -> None:
        """A role that exits on its own is counted (the audit fails on it) and started again,
        so the other faults still get their turn."""
        for role in self._roles():
            assert role.proc is not None
            if role.proc.poll() is not None:
                tail = "\n".join(role.log.read_text(errors="replace").splitlines()[-20:])
                self.unexpected_exits.append(
                    f"{role.name} exited ({role.proc.returncode}) at {self.clock():.0f} s"
                )
                Console(stderr=True).log(f"soak: {self.unexpected_exits[-1]}; {role.log} ends:\n{tail}")
                if role.name in self.actors:
                    self.collect(role.name)
                role.start()

    def _sample(self, stop: threading.Event) -> None:
        """Once a second: every role's memory, every actor's progress (version, missed deadlines)."""
        while not stop.wait(1.0):
            for role in self._roles():
                if role.alive():
                    assert role.proc is not None
                    total, anon = tree_memory_mb(role.proc.pid)
                    role.anon_mb.append(anon)
                    role.peak_mb = max(role.peak_mb, total)
            for actor, role in self.actors.items():
                progress = run_folder.read_actor_progress(self.run_dir, actor)
                if progress is not None:
                    self._note_progress(actor, role, progress)

    def _note_progress(self, actor: str, role: Role, progress: run_folder.ActorProgress) -> None:
        """One sample of an actor incarnation's policy version and missed deadlines."""
        self.samples.append(
            audit.Sample(
                self.clock(), actor, role.incarnations, progress.policy_version, progress.missed_deadlines
            )
        )

    def audit(
        self, codes: dict[str, int | None], learner_code: int | None, cameras: dict[str, Any]
    ) -> dict[str, Any]:
        sessions = [*self.faults.sessions, self.run_dir]
        stored, ledger, ledger_ids, overlap = audit.session_totals(sessions, set(ACTORS))
        totals = ledger.audit()
        sent = sum(self.sent.values())
        restarts = len(self.faults.sessions)
        drops = [audit.version_drops(v) for v in self.versions]
        growth = audit.memory_growth(
            {r.name: max(r.anon_mb, r.longest_anon_mb, key=len) for r in self._roles()}
        )
        lost, twice = max(0, sent - stored), max(0, stored - sent)
        # A learner restarted without its checkpoint has forgotten what the ended session stored:
        # a batch whose acknowledgement that session's stop lost is resent and stored again.
        # Those rows (at most a batch each: two-camera batches, ~3.6 MB, exceed transport.coalesce_kb
        # and never go joined) are counted apart; any other row stored twice is not.
        by_two_sessions = min(twice, overlap * TransportConfig().batch_transitions)
        duplicates = twice - by_two_sessions
        evidence = audit.Evidence(
            conserved=lost == duplicates == totals.lost_to_actor_crash == totals.in_flight == 0,
            samples=self.samples,
            ledger_actor_ids=ledger_ids,
            actor_ids=set(ACTORS),
            logs={r.name: r.log.read_text(errors="replace") for r in self._roles()},
            unexpected_exits=len(self.unexpected_exits),
            learner_restarts=sorted(
                [r.start for r in self.faults.records if r.name in Faults.RESTART_THE_LEARNER]
                + self.learner_exits
            ),
        )
        faults = audit.fault_outcomes(self.faults.records, evidence)
        return {
            "bench": "soak",
            "seconds": round(self.seconds),
            "default_config": not any(is_durability_override(o) for o in self.overrides),
            "overrides": self.overrides,
            "curve": True,
            "cameras": cameras,
            "fault_kinds_injected": sum(1 for f in faults.values() if f["injected"]),
            "faults_injected": len(self.faults.records),
            "faults_passed": sorted(k for k, f in faults.items() if f["passed"]),
            "faults_failed": sorted(k for k, f in faults.items() if not f["passed"]),
            "transitions_sent": sent,
            "transitions_stored": stored,
            "transitions_lost": lost,
            "duplicates": duplicates,
            "batches_received": totals.received,
            "batches_received_by_two_sessions": overlap,
            "rows_stored_by_two_sessions": by_two_sessions,
            "batches_lost_to_actor_crash": totals.lost_to_actor_crash,
            "batches_dropped_by_actor": totals.dropped_by_actor,
            "batches_in_flight_at_end": totals.in_flight,
            "duplicate_arrivals_refused": totals.duplicates,
            "learner_sessions": restarts + 1,
            "policy_versions_monotonic_per_session": all(d <= restarts for d in drops),
            "policy_version_max": max((max(v, default=-1) for v in self.versions), default=-1),
            "actor_steps_per_s": round(self.ticks / self.seconds / len(ACTORS), 1),
            "missed_deadlines_outside_faults": audit.missed_outside_faults(self.samples, self.faults.records),
            "missed_deadlines_total": _total_missed(self.samples),
            "peak_rss_mb": round(max(r.peak_mb for r in self._roles()), 1),
            "anon_memory_growth_mb": growth,
            "memory_flat": all(g < audit.MEMORY_GROWTH_MB for g in growth.values()),
            "unexpected_exits": self.unexpected_exits,
            "exit_codes": {**codes, "learner": learner_code},
            "faults": faults,
        }

    def _roles(self) -> list[Role]:
        return [self.learner, *self.actors.values()]


def _total_missed(samples: list[audit.Sample]) -> int:
    last: dict[tuple[str, int], int] = {}
    for s in samples:
        last[(s.actor, s.incarnation)] = max(last.get((s.actor, s.incarnation), 0), s.missed_deadlines)
    return sum(last.values())


def camera_cost() -> dict[str, Any]:
    """Env steps/s of the soak's task with and without its two cameras (one process, median of
    interleaved rounds): what the cameras cost an actor."""
    import robotrl.sim  # noqa: F401  (chooses the GL backend before mujoco loads)
    from robotrl.bench.sim import measure

    without, _ = measure("reach", (), 1.5, 3)
    with_cameras, _ = measure("reach", CAMERAS, 1.5, 3)
    return {
        "names": list(CAMERAS),
        "size": IMAGE_SIZE,
        "env_steps_per_s_without": round(without, 1),
        "env_steps_per_s_with": round(with_cameras, 1),
        "steps_per_s_cost": round(without - with_cameras, 1),
    }


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


def run(quick: bool = False) -> dict[str, Any]:
    seconds = QUICK_S if quick else FULL_S
    keep = os.environ.get("ROBOTRL_SOAK_DIR")  # keep the run folder and logs there
    overrides = shlex.split(os.environ.get("ROBOTRL_SOAK_OVERRIDES", ""))  # extra learner KEY=VALUE
    with tempfile.TemporaryDirectory(prefix="robotrl-soak-") as tmp:
        root = Path(keep) if keep else Path(tmp)
        result = Soak(root, seconds, overrides).run()
    rows = [[k, json.dumps(v)] for k, v in result.items() if k not in ("bench", "faults")]
    rows += [
        [f"fault {k}", f"{'pass' if f['passed'] else 'FAIL'} x{f['injected']}: {f['check']}"]
        for k, f in result["faults"].items()
    ]
    report(f"soak: learner + 2 actors, {seconds:.0f} s with faults", ["measure", "value"], rows, result)
    return result
