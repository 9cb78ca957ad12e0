"""The soak bench's audit: every row accounted for, per learner session, and each fault judged.

A learner restarted without a checkpoint starts a new session (fresh counters, ledger and
version numbers); its predecessor's final checkpoint was moved aside by the fault, so rows
stored and batches received are summed over sessions, and policy versions are judged
monotonic within a session (one drop allowed per session start). Missed control
deadlines count only outside fault windows (plus :data:`GRACE_S`, an episode's progress
write). Each fault's check is the target behaviour of issue 31, stated in ``check``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robotrl.bench.soak_faults import FaultRecord
from robotrl.core import run_folder
from robotrl.learner.journal import LEDGER_FILE
from robotrl.transport.ledger import SeqLedger

GRACE_S = 5.0
NAN_RECOVERY_S = 40.0
"""After a NaN update, an actor must execute a newer finite version within this long."""
FOLLOW_S = 60.0
"""After a restart without a checkpoint, an actor must execute the new session's policy within this long."""
FLOOD_LOG_LINES = 50
"""The most learner log lines a whole identity flood may cause."""
MEMORY_GROWTH_MB = 64.0
"""Flat memory: the floor of a role's anonymous memory (heap and shared memory, not file-backed:
robotrl/bench/soak_faults.py ``tree_memory_mb``) rises less than this from its longest
incarnation's middle to its last third. Whole resident memory is no measure of a leak: a
learner's rose by +9 to +74 MB in quick soaks on a 2-core machine, and in the one incarnation
split into its parts nearly all the rise was file-backed pages (libraries, memory-mapped rows)
it paged in as it ran, which the kernel can take back."""


@dataclass(frozen=True)
class Sample:
    """An actor's progress file, read once a second (or when the incarnation ends)."""

    time: float
    actor: str
    incarnation: int
    policy_version: int
    missed_deadlines: int


def session_totals(session_dirs: Sequence[Path], actor_ids: set[str]) -> tuple[int, SeqLedger, set[str], int]:
    """Rows stored over every session's last checkpoint; the real actors' ledgers merged; every
    actor id any ledger holds (a hostile peer's too); and the batches two sessions both
    received (an unacknowledged batch resent to the new session)."""
    stored, overlap = 0, 0
    streams: dict[tuple[str, str], dict[str, Any]] = {}
    for folder in session_dirs:
        ckpt = run_folder.latest_checkpoint(folder)
        if ckpt is None:
            continue
        stored += int(json.loads((ckpt / run_folder.CHECKPOINT_COUNTERS).read_text())["transitions"])
        for entry in json.loads((ckpt / LEDGER_FILE).read_text())["streams"]:
            key = (entry["actor_id"], entry["stream"])
            if key in streams:
                overlap += _overlap(streams[key]["received"], entry["received"])
                entry = _merged(streams[key], entry)
            streams[key] = entry
    real = [e for (actor, _), e in streams.items() if actor in actor_ids]
    return stored, SeqLedger.from_json({"version": 1, "streams": real}), {a for a, _ in streams}, overlap


def _overlap(a: list[list[int]], b: list[list[int]]) -> int:
    seqs = [set(range(lo, hi)) for lo, hi in ((r[0], r[1]) for r in a)]
    mine = set().union(*seqs) if seqs else set()
    return sum(1 for lo, hi in b for s in range(lo, hi) if s in mine)


def _merged(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    ranges = sorted([*a["received"], *b["received"]])
    out: list[list[int]] = []
    for lo, hi in ranges:
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return {
        **a,
        "received": out,
        "duplicates": a["duplicates"] + b["duplicates"],
        "numbered": max(a["numbered"], b["numbered"]),
        "dropped": max(a.get("dropped", 0), b.get("dropped", 0)),
    }


def version_drops(versions: Iterable[int]) -> int:
    """How often a sequence of executed policy versions goes back."""
    return sum(1 for a, b in itertools.pairwise(versions) if b < a)


def missed_outside_faults(samples: Sequence[Sample], records: Sequence[FaultRecord]) -> int:
    """Missed deadlines first seen in a sample outside every fault window (plus the grace)."""
    windows = [(r.start, r.end + GRACE_S) for r in records]
    seen: dict[tuple[str, int], int] = {}
    outside = 0
    for s in sorted(samples, key=lambda s: s.time):
        key = (s.actor, s.incarnation)
        new = s.missed_deadlines - seen.get(key, 0)
        seen[key] = s.missed_deadlines
        if new > 0 and not any(lo <= s.time <= hi for lo, hi in windows):
            outside += new
    return outside


def memory_growth(series: dict[str, list[float]]) -> dict[str, float]:
    return {name: round(_growth(samples), 1) for name, samples in series.items()}


def _growth(samples: list[float]) -> float:
    """Lowest memory of the last third minus the lowest of the middle third of one incarnation (its
    first third is start-up). The floor is what a leak raises; batches an actor holds while the
    learner is away for a fault are a transient rise the floor ignores."""
    if len(samples) < 6:
        return 0.0
    n = len(samples) // 3
    mid, last = samples[n : 2 * n], samples[2 * n :]
    return min(last) - min(mid)


@dataclass(frozen=True)
class Evidence:
    """What the fault checks read, gathered once at the end of a run."""

    conserved: bool
    """0 rows lost, 0 stored twice, no batch lost to an actor crash or still in flight."""
    samples: Sequence[Sample]
    ledger_actor_ids: set[str]
    actor_ids: set[str]
    logs: dict[str, str]
    unexpected_exits: int
    learner_restarts: Sequence[float]
    """When a fault restarted the learner, or it exited on its own."""


def _after(ev: Evidence, start: float, within: float, test: Callable[[Sample], bool]) -> bool:
    """Whether a sample passes ``test`` after ``start``, within ``within`` seconds and before the
    learner next restarts (a restart would hide what the learner did)."""
    end = min([start + within, *(t for t in ev.learner_restarts if t > start)])
    return any(start < s.time <= end and test(s) for s in ev.samples)


def _version_at(ev: Evidence, when: float) -> dict[str, int]:
    latest: dict[str, int] = {}
    for s in sorted(ev.samples, key=lambda s: s.time):
        if s.time <= when:
            latest[s.actor] = s.policy_version
    return latest


def _followed(ev: Evidence, r: FaultRecord) -> bool:
    before = _version_at(ev, r.start)
    return _after(ev, r.end, FOLLOW_S, lambda s: s.policy_version != before.get(s.actor, s.policy_version))


def _recovered(ev: Evidence, r: FaultRecord) -> bool:
    last = r.details.get("last_version_before")
    return last is not None and _after(ev, r.end, NAN_RECOVERY_S, lambda s: s.policy_version > last)


def _actor_log(ev: Evidence, text: str) -> int:
    return sum(log.count(text) for name, log in ev.logs.items() if name != "learner")


CHECKS: dict[str, tuple[str, Callable[[Evidence, FaultRecord], bool]]] = {
    "partition": (
        "actors notice the silent learner and resend; nothing lost or stored twice",
        lambda ev, r: _actor_log(ev, "learner silent for") > 0 and ev.conserved,
    ),
    "learner_sigkill": (
        "the learner resumes from its checkpoint and journal; nothing lost or stored twice",
        lambda ev, r: ev.logs["learner"].count("resumed from") > 0 and ev.conserved,
    ),
    "actor_sigkill": (
        "the restarted actor resends its spool; nothing lost or stored twice",
        lambda ev, r: ev.conserved,
    ),
    "learner_frozen": (
        "actors notice the silent learner; every role keeps running",
        lambda ev, r: _actor_log(ev, "learner silent for") > 0 and ev.unexpected_exits == 0,
    ),
    "weights_corrupted": (
        "a byte of a weight update is flipped on the wire; the actor keeps running on verified weights",
        lambda ev, r: r.details.get("bytes_flipped", 0) > 0 and ev.unexpected_exits == 0,
    ),
    "identity_flood": (
        f"no ledger entry for an id that sent no valid batch; at most {FLOOD_LOG_LINES} learner log "
        "lines for the whole flood",
        lambda ev, r: (
            ev.ledger_actor_ids <= ev.actor_ids and r.details["learner_log_lines"] <= FLOOD_LOG_LINES
        ),
    ),
    "oversized_messages": (
        "the learner refuses the message before assembling it: its peak memory rises by less than a "
        "quarter of the message, and it keeps running",
        lambda ev, r: (
            r.details["learner_alive"] and r.details["learner_peak_rise_mb"] < r.details["message_mb"] / 4
        ),
    ),
    "twin_actor_id": (
        "one of two live processes with one actor id is fenced (stops on its own); nothing lost or "
        "stored twice",
        lambda ev, r: len(r.details["fenced"]) > 0 and ev.conserved,
    ),
    "journal_disk_full": (
        "the journal refuses writes, the learner acknowledges none of those batches, and after a SIGKILL "
        "nothing is lost or stored twice",
        lambda ev, r: (r.details.get("journal_writes_refused") or 0) > 0 and ev.conserved,
    ),
    "nan_update": (
        f"after one NaN update an actor executes a newer, finite version within {NAN_RECOVERY_S:.0f} s",
        _recovered,
    ),
    "learner_restart_without_checkpoint": (
        f"actors execute the new session's policy within {FOLLOW_S:.0f} s",
        _followed,
    ),
}


def fault_outcomes(records: Sequence[FaultRecord], ev: Evidence) -> dict[str, dict[str, Any]]:
    """Per fault name: how often it was injected, its check and whether every injection passed."""
    out: dict[str, dict[str, Any]] = {}
    for name, (check, passed) in CHECKS.items():
        mine = [r for r in records if r.name == name]
        out[name] = {
            "injected": len(mine),
            "check": check,
            "passed": bool(mine) and all(passed(ev, r) for r in mine),
            "at_s": [round(r.start, 1) for r in mine],
            "details": [r.details for r in mine if r.details],
        }
    return out
