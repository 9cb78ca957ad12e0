"""The soak bench's processes and fault injectors (:mod:`robotrl.bench.soak` runs them on a schedule).

Each fault acts on the real processes, files and links of a soak, records its window
(start, end, what it saw) in a :class:`FaultRecord`, and returns; the audit at the end
judges each one (:mod:`robotrl.bench.soak_audit`). The learner is started through
:mod:`robotrl.bench.soak_learner`, whose signals inject the NaN update and the full
journal disk; the hostile peer is a raw ZeroMQ socket authenticated with an actor's key
(a peer that CURVE lets in, which is the one that can do harm).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robotrl.bench.soak_learner import HOOKS_READY
from robotrl.core import run_folder

if TYPE_CHECKING:
    from robotrl.bench.soak import Soak

PARTITION_S = 3.0
FREEZE_S = 3.0
JOURNAL_FULL_S = 4.0
TWIN_S = 8.0
"""How long a second process with an actor's id runs next to it (one of the two should be fenced)."""
FLOOD_PINGS = 4000
FLOOD_SOCKETS = 8
OVERSIZED_FRAME_MB = 64
OVERSIZED_FRAMES = 4
"""A hostile message: a header and this many frames of this size, each under the per-frame
``MAXMSGSIZE`` and together far over any batch's size."""
TOO_MANY_FRAMES = 1000
SETTLE_S = 5.0
"""After a hostile burst, how long the learner gets to receive it before its memory is read."""
_pause = threading.Event()  # never set: waiting on it is a pause


def tree_memory_mb(pid: int) -> tuple[float, float]:
    """Resident memory of ``pid`` and its descendants (an actor's inference worker), in MB: all
    of it (VmRSS) and its anonymous part (RssAnon + RssShmem: heap, stacks, shared-memory
    segments), where a leak shows. The rest is file-backed pages the kernel can take back,
    which grow as code runs for the first time (torch's libraries page in) and as memory-mapped
    image rows are read: a learner's grew +39 MB in two minutes of a quick soak while its
    anonymous memory stayed within +3 MB."""
    total, anon, todo = 0, 0, [pid]
    while todo:
        p = todo.pop()
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
                elif line.startswith(("RssAnon:", "RssShmem:")):
                    anon += int(line.split()[1])
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return total / 1024, anon / 1024


def peak_rss_mb(pid: int) -> float:
    """The high-water mark of ``pid``'s resident memory (VmHWM), in MB: it catches a spike a
    once-a-second sample misses."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


@dataclass
class Role:
    """One role's process, restarted in place by the faults."""

    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    anon_mb: list[float] = field(default_factory=list)
    """Anonymous resident memory (:func:`tree_memory_mb`), once a second, of the current
    incarnation (a restarted process starts anew)."""
    longest_anon_mb: list[float] = field(default_factory=list)
    """The samples of the longest-lived incarnation so far (where growth is judged)."""
    peak_mb: float = 0.0
    """The highest resident memory sampled, file-backed or not."""
    incarnations: int = 0
    log_mark: int = 0
    """The log's size when the current incarnation started (where its lines begin)."""

    def start(self) -> None:
        self.log_mark = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT)
        self.incarnations += 1
        if len(self.anon_mb) > len(self.longest_anon_mb):
            self.longest_anon_mb = self.anon_mb
        self.anon_mb = []

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

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

    def wait_for_log(self, pattern: str, after: int, timeout_s: float) -> re.Match[str] | None:
        """The first match of ``pattern`` in the log past byte ``after``, waiting up to ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = re.search(pattern, self.log.read_bytes()[after:].decode(errors="replace"))
            if found or time.monotonic() >= deadline:
                return found
            _pause.wait(0.2)


@dataclass
class FaultRecord:
    """One injection: its window on the soak's clock and what the injector saw."""

    name: str
    start: float
    end: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)


class Faults:
    """The injectors, by name (:data:`NAMES`); each appends its record to ``records``."""

    NAMES = (
        "partition",
        "learner_sigkill",
        "actor_sigkill",
        "learner_frozen",
        "weights_corrupted",
        "identity_flood",
        "oversized_messages",
        "twin_actor_id",
        "journal_disk_full",
        "nan_update",
        "learner_restart_without_checkpoint",
    )

    RESTART_THE_LEARNER = ("learner_sigkill", "journal_disk_full", "learner_restart_without_checkpoint")

    def __init__(self, soak: Soak) -> None:
        self.soak = soak
        self.records: list[FaultRecord] = []
        self.sessions: list[Path] = []
        """Run folders of the learner sessions ended by a restart without a checkpoint."""

    def inject(self, name: str) -> FaultRecord:
        record = FaultRecord(name, self.soak.clock())
        getattr(self, name)(record)
        record.end = self.soak.clock()
        self.records.append(record)
        return record

    # -- the network and the processes -----------------------------------------------------

    def partition(self, record: FaultRecord) -> None:
        for t, _ in self.soak.proxies.values():
            t.partition()
        _pause.wait(PARTITION_S)
        for t, _ in self.soak.proxies.values():
            t.heal()

    def learner_sigkill(self, record: FaultRecord) -> None:
        """SIGKILL between two checkpoints, once one exists (waits up to 60 s for it)."""
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline and run_folder.latest_checkpoint(self.soak.run_dir) is None:
            _pause.wait(0.2)
        record.details["journaled_batches_at_kill"] = len(list(self._journal().glob("*.rrspool")))
        self.soak.learner.kill()
        self.soak.learner.start()

    def actor_sigkill(self, record: FaultRecord) -> None:
        victim = self.soak.actors[self.soak.actor_ids[0]]
        victim.kill()
        self.soak.collect(victim.name)
        victim.start()

    def learner_frozen(self, record: FaultRecord) -> None:
        self.soak.learner.signal(signal.SIGSTOP)
        _pause.wait(FREEZE_S)
        self.soak.learner.signal(signal.SIGCONT)

    def weights_corrupted(self, record: FaultRecord) -> None:
        """Flip a byte in the middle of the next weight update on its way to the second actor."""
        proxy = self.soak.proxies[self.soak.actor_ids[1]][1]
        before = proxy.corruptions
        proxy.corrupt_next_chunk(8192)
        proxy.corrupted.clear()
        proxy.corrupted.wait(60.0)  # a learner just restarted publishes nothing for a while
        record.details["bytes_flipped"] = proxy.corruptions - before

    # -- the learner's own faults (through soak_learner's signals) ----------------------------

    def journal_disk_full(self, record: FaultRecord) -> None:
        """The journal's disk is full for a while; then the learner is SIGKILLed before it can
        checkpoint, so every batch it acknowledged meanwhile must come from somewhere else."""
        learner = self._hooked_learner()
        mark = learner.log.stat().st_size
        learner.signal(signal.SIGUSR2)
        _pause.wait(JOURNAL_FULL_S)
        learner.signal(signal.SIGUSR2)
        off = learner.wait_for_log(r"journal disk full off \((\d+) writes refused", mark, 10.0)
        record.details["journal_writes_refused"] = int(off.group(1)) if off else None
        learner.kill()
        learner.start()

    def nan_update(self, record: FaultRecord) -> None:
        """One update leaves the policy NaN; records the last version published before it."""
        learner = self._hooked_learner()
        mark = learner.log.stat().st_size
        learner.signal(signal.SIGUSR1)
        hit = learner.wait_for_log(r"left the policy's parameters NaN \(policy version (\d+)", mark, 90.0)
        record.details["last_version_before"] = int(hit.group(1)) if hit else None

    def learner_restart_without_checkpoint(self, record: FaultRecord) -> None:
        """Stop the learner (a final checkpoint), move its state aside as an ended session, and
        start it on the bare run folder: version numbers start again from 0. The learner must be
        running first: a SIGTERM before `robotrl learner` installs its handler (a learner just
        restarted by the fault before, still importing) kills it without that checkpoint, and
        the batches its journal holds would be moved aside unaccounted."""
        self._running_learner().stop(signal.SIGTERM, 120)
        session = self.soak.root / "sessions" / str(len(self.sessions))
        session.mkdir(parents=True)
        for name in (run_folder.CHECKPOINTS, run_folder.JOURNAL):
            if (self.soak.run_dir / name).exists():
                shutil.move(self.soak.run_dir / name, session / name)
        self.sessions.append(session)
        self.soak.learner.start()

    def _hooked_learner(self) -> Role:
        """The learner, once its current incarnation has installed the fault hooks (a signal
        before that would kill it)."""
        learner = self.soak.learner
        if learner.wait_for_log(re.escape(HOOKS_READY), learner.log_mark, 120.0) is None:
            raise RuntimeError(f"the learner did not install its fault hooks within 120 s; see {learner.log}")
        return learner

    def _running_learner(self) -> Role:
        """The learner, once its current incarnation is built and running (its banner printed):
        from then on a SIGTERM stops it with a final checkpoint."""
        learner = self._hooked_learner()
        if learner.wait_for_log(r"robotrl learner\S*: \S+ on ", learner.log_mark, 120.0) is None:
            raise RuntimeError(f"the learner did not start running within 120 s; see {learner.log}")
        return learner

    def _journal(self) -> Path:
        return self.soak.run_dir / run_folder.JOURNAL

    # -- identity and hostile peers -----------------------------------------------------------

    def twin_actor_id(self, record: FaultRecord) -> None:
        """A second live process with the second actor's id (same spool, same key) for a while;
        records which of the two stopped on its own (fenced), if either did."""
        original = self.soak.actors[self.soak.actor_ids[1]]
        twin = self.soak.twin_role()
        twin.start()
        deadline = time.monotonic() + TWIN_S
        while time.monotonic() < deadline and original.alive() and twin.alive():
            _pause.wait(0.2)
        record.details["fenced"] = [r.name for r in (original, twin) if not r.alive()]
        record.details["exit_codes"] = {
            r.name: r.proc.returncode for r in (original, twin) if r.proc is not None and not r.alive()
        }
        if twin.alive():
            twin.stop(signal.SIGINT, 60)
        self.soak.collect_twin(twin)
        if not original.alive():
            self.soak.collect(original.name)
            original.start()

    def identity_flood(self, record: FaultRecord) -> None:
        """Pings from thousands of made-up actor ids over several connections; records the
        learner's log lines and memory high-water mark across it."""
        learner = self.soak.learner
        assert learner.proc is not None
        lines, hwm = _count_lines(learner.log), peak_rss_mb(learner.proc.pid)
        sent = flood_identities(self.soak.transitions_endpoint, self.soak.peer_keys(), FLOOD_PINGS)
        _pause.wait(SETTLE_S)
        record.details.update(
            pings=sent,
            learner_log_lines=_count_lines(learner.log) - lines,
            learner_peak_rise_mb=round(peak_rss_mb(learner.proc.pid) - hwm, 1),
        )

    def oversized_messages(self, record: FaultRecord) -> None:
        """A multi-frame message over any batch's size and one with too many frames; records
        the learner's memory high-water mark across them."""
        learner = self.soak.learner
        assert learner.proc is not None
        hwm = peak_rss_mb(learner.proc.pid)
        sent = send_oversized(self.soak.transitions_endpoint, self.soak.peer_keys())
        _pause.wait(SETTLE_S)
        record.details.update(
            message_mb=round(sent / (1 << 20), 1),
            learner_alive=learner.alive(),
            learner_peak_rise_mb=round(peak_rss_mb(learner.proc.pid) - hwm, 1),
        )


def _count_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n")


def _hostile_socket(ctx: Any, endpoint: str, keys: Any) -> Any:
    import zmq

    from robotrl.transport.sockets import client_socket

    sock = client_socket(ctx, zmq.DEALER, keys)
    sock.setsockopt(zmq.SNDTIMEO, 5000)
    sock.setsockopt(zmq.LINGER, 10_000)  # what was queued still goes out on close
    sock.connect(endpoint)
    return sock


def flood_identities(endpoint: str, keys: Any, pings: int) -> int:
    """Send ``pings`` pings, each from a new random actor id and stream, over
    :data:`FLOOD_SOCKETS` connections (new routes too); the number sent."""
    import zmq

    from robotrl.transport import protocol as p
    from robotrl.wire.codec import encode

    ctx = zmq.Context()
    sent = 0
    try:
        for _ in range(FLOOD_SOCKETS):
            sock = _hostile_socket(ctx, endpoint, keys)
            for _ in range(pings // FLOOD_SOCKETS):
                sender = f"hostile-{secrets.token_hex(4)}"
                ping = p.control(
                    p.PING, sender, stream=secrets.token_hex(9), next=secrets.randbelow(1 << 40), dropped=0
                )
                try:
                    sock.send_multipart(encode(ping))
                except zmq.Again:
                    break
                sent += 1
            sock.close()
    finally:
        ctx.term()
    return sent


def send_oversized(endpoint: str, keys: Any) -> int:
    """One message of a ping header and :data:`OVERSIZED_FRAMES` large frames, then one of
    :data:`TOO_MANY_FRAMES` small frames; the bytes of the larger."""
    import zmq

    from robotrl.transport import protocol as p
    from robotrl.wire.codec import encode

    header = encode(p.control(p.PING, "hostile-oversized"))[0]
    payload = bytes(OVERSIZED_FRAME_MB << 20)
    ctx = zmq.Context()
    try:
        sock = _hostile_socket(ctx, endpoint, keys)
        try:
            sock.send_multipart([header, *[payload] * OVERSIZED_FRAMES], copy=False)
            sock.send_multipart([header, *[b"x"] * TOO_MANY_FRAMES])
        except zmq.Again:
            pass
        sock.close()
    finally:
        ctx.term()
    return len(header) + OVERSIZED_FRAMES * len(payload)
