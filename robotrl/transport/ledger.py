"""The learner's account of every sequence number of every actor stream.

A stream is one incarnation of one actor (``actor_id`` plus a random session
id chosen when the actor process starts), numbered from 0. For each stream the
ledger keeps the received sequence numbers as sorted disjoint ranges, counts
duplicates, and knows how far the actor says it has numbered, so it can list
what is missing. It serialises to JSON so a learner can checkpoint it beside its
replay buffer and drop, after a restart, batches its previous life already took.

Streams exist only once a batch of theirs is recorded (a ping numbers a known stream,
never creates one). Of each actor's superseded incarnations only the newest
``keep_superseded`` are kept; older ones are retired into totals the audit still
counts, so the ledger (and every checkpoint holding it) stays bounded by actors, not
by how often they restarted.

It also holds each actor's **epoch**, as Kafka holds a producer's: the stream id of the
newest process that has pinged for that actor id (stream ids sort by creation time); an id
gets one only once a batch of it was recorded. A
process whose own stream is older has been superseded and is fenced; the epoch is
checkpointed with the rest, so a restarted learner still fences it. Batches a restarted
actor resends from its spool carry older streams but arrive from the new process, whose
epoch is current: fencing looks at the process, never at a batch's stream.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass
from typing import Any


class RangeSet:
    """Sorted disjoint half-open integer ranges [lo, hi)."""

    def __init__(self, ranges: list[tuple[int, int]] | None = None) -> None:
        self._lo: list[int] = []
        self._hi: list[int] = []
        for lo, hi in ranges or []:
            self.add_range(lo, hi)

    def __contains__(self, x: int) -> bool:
        i = bisect.bisect_right(self._lo, x) - 1
        return i >= 0 and x < self._hi[i]

    def add(self, x: int) -> bool:
        """Add ``x``; False when it was already present."""
        if x in self:
            return False
        self.add_range(x, x + 1)
        return True

    def add_range(self, lo: int, hi: int) -> None:
        if hi <= lo:
            return
        i = bisect.bisect_left(self._hi, lo)  # first range that ends at or after lo
        j = bisect.bisect_right(self._lo, hi)  # ranges [i, j) touch [lo, hi]
        if i < j:
            lo = min(lo, self._lo[i])
            hi = max(hi, self._hi[j - 1])
        self._lo[i:j] = [lo]
        self._hi[i:j] = [hi]

    def discard(self, x: int) -> None:
        """Remove ``x`` (splitting its range); nothing when absent."""
        if x not in self:
            return
        i = bisect.bisect_right(self._lo, x) - 1
        lo, hi = self._lo[i], self._hi[i]
        pieces = [(a, b) for a, b in ((lo, x), (x + 1, hi)) if b > a]
        self._lo[i : i + 1] = [a for a, _ in pieces]
        self._hi[i : i + 1] = [b for _, b in pieces]

    def ranges(self) -> list[tuple[int, int]]:
        return list(zip(self._lo, self._hi, strict=True))

    def count(self) -> int:
        return sum(h - lo for lo, h in zip(self._lo, self._hi, strict=True))

    def gaps(self, upto: int) -> list[tuple[int, int]]:
        """Ranges in [0, upto) that are not in the set."""
        out, at = [], 0
        for lo, hi in self.ranges():
            if lo >= upto:
                break
            if lo > at:
                out.append((at, lo))
            at = max(at, hi)
        if at < upto:
            out.append((at, upto))
        return out


@dataclass(frozen=True)
class StreamAccount:
    """What the learner knows about one actor stream."""

    actor_id: str
    stream: str
    received: int
    duplicates: int
    numbered: int
    """Sequence numbers the actor says it has assigned (0 .. numbered-1)."""
    missing: list[tuple[int, int]]
    """Ranges below ``numbered`` never received (still in flight, or dropped by the actor)."""
    dropped: int = 0
    """Batches the actor says it dropped on purpose (its spool full): part of ``missing``."""
    superseded: bool = False
    """A newer stream of the same actor exists: this incarnation ended (crashed or stopped)."""

    @property
    def missing_count(self) -> int:
        return sum(hi - lo for lo, hi in self.missing)


@dataclass(frozen=True)
class Audit:
    """Every missing batch of every stream, by cause."""

    received: int
    duplicates: int
    dropped_by_actor: int
    """Numbered, then dropped by the actor on purpose (spool overflow); reported by its pings."""
    lost_to_actor_crash: int
    """Missing from an ended incarnation: in its memory when it died, never reached its spool."""
    in_flight: int
    """Missing from a live incarnation: may still arrive."""


_RETIRED = ("streams", "received", "duplicates", "dropped_by_actor", "lost_to_actor_crash")
"""Totals kept of the streams retired from the ledger."""


class SeqLedger:
    """Thread-safe per-stream record of received sequence numbers."""

    def __init__(self, keep_superseded: int = 16) -> None:
        self._lock = threading.Lock()
        self._keep_superseded = keep_superseded
        self._got: dict[tuple[str, str], RangeSet] = {}
        self._dups: dict[tuple[str, str], int] = {}
        self._numbered: dict[tuple[str, str], int] = {}
        self._dropped: dict[tuple[str, str], int] = {}
        self._retired = dict.fromkeys(_RETIRED, 0)
        self._epochs: dict[str, str] = {}
        self._delivered: set[str] = set()  # actors with a recorded batch: only they get an epoch

    def claim_epoch(self, actor_id: str, process_stream: str) -> bool:
        """Whether the process whose own stream is ``process_stream`` may speak for ``actor_id``:
        True when it is the newest seen (a newer one becomes the epoch), False when fenced.
        An actor id no batch has come from gets no epoch: pings alone create no state."""
        with self._lock:
            current = self._epochs.get(actor_id)
            if current is None and actor_id not in self._delivered:
                return True
            if current is None or process_stream > current:
                self._epochs[actor_id] = process_stream
                return True
            return process_stream == current

    def epoch(self, actor_id: str) -> str | None:
        """The stream of the newest process of ``actor_id``, or None before any."""
        with self._lock:
            return self._epochs.get(actor_id)

    def record(self, actor_id: str, stream: str, seq: int) -> bool:
        """Note ``seq`` as received; False (and a duplicate counted) when it was already."""
        key = (actor_id, stream)
        with self._lock:
            got = self._got.get(key)
            if got is None:
                got = self._got[key] = RangeSet()
                self._retire_oldest(actor_id, stream)
            self._delivered.add(actor_id)
            if got.add(seq):
                self._numbered[key] = max(self._numbered.get(key, 0), seq + 1)
                return True
            self._dups[key] = self._dups.get(key, 0) + 1
            return False

    def forget(self, actor_id: str, stream: str, seq: int) -> None:
        """Undo :meth:`record` of a batch the learner could not keep, so its resend is taken."""
        with self._lock:
            got = self._got.get((actor_id, stream))
            if got is not None:
                got.discard(seq)

    def seen(self, actor_id: str, stream: str, seq: int) -> bool:
        with self._lock:
            got = self._got.get((actor_id, stream))
            return got is not None and seq in got

    def numbered(self, actor_id: str, stream: str, upto: int, dropped: int = 0) -> bool:
        """The actor reports it has assigned sequence numbers below ``upto`` and dropped ``dropped``;
        False (and nothing noted) for a stream no batch of which was recorded."""
        key = (actor_id, stream)
        with self._lock:
            if key not in self._got:
                return False
            self._numbered[key] = max(self._numbered.get(key, 0), upto)
            self._dropped[key] = max(self._dropped.get(key, 0), min(dropped, upto))
            return True

    def numbered_upto(self, actor_id: str, stream: str) -> int:
        """How far the stream is known to be numbered (0 for a stream not recorded)."""
        with self._lock:
            return self._numbered.get((actor_id, stream), 0)

    def _retire_oldest(self, actor_id: str, arrived: str) -> None:
        """Fold the actor's superseded streams beyond ``keep_superseded`` (never the one that just
        ``arrived``) into the retired totals."""
        streams = sorted(s for a, s in self._got if a == actor_id and s != arrived)
        streams.append(arrived)
        for stream in streams[: max(0, len(streams) - 1 - self._keep_superseded)]:
            key = (actor_id, stream)
            got, numbered = self._got.pop(key), self._numbered.pop(key, 0)
            dropped = self._dropped.pop(key, 0)
            missing = sum(hi - lo for lo, hi in got.gaps(numbered))
            self._retired["streams"] += 1
            self._retired["received"] += got.count()
            self._retired["duplicates"] += self._dups.pop(key, 0)
            self._retired["dropped_by_actor"] += min(dropped, missing)
            self._retired["lost_to_actor_crash"] += missing - min(dropped, missing)

    def accounts(self) -> list[StreamAccount]:
        """One account per stream; stream ids sort by creation time, so the last of an actor is live."""
        with self._lock:
            keys = sorted(self._got)
            newest = {a: s for a, s in keys}
            return [
                StreamAccount(
                    a,
                    s,
                    self._got[(a, s)].count(),
                    self._dups.get((a, s), 0),
                    self._numbered.get((a, s), 0),
                    self._got[(a, s)].gaps(self._numbered.get((a, s), 0)),
                    self._dropped.get((a, s), 0),
                    newest[a] != s,
                )
                for a, s in keys
            ]

    def audit(self) -> Audit:
        """Totals over every stream, each missing batch under its cause."""
        with self._lock:
            retired = dict(self._retired)
        received, duplicates = retired["received"], retired["duplicates"]
        dropped, crashed, in_flight = retired["dropped_by_actor"], retired["lost_to_actor_crash"], 0
        for acct in self.accounts():
            received += acct.received
            duplicates += acct.duplicates
            gone = min(acct.dropped, acct.missing_count)
            dropped += gone
            if acct.superseded:
                crashed += acct.missing_count - gone
            else:
                in_flight += acct.missing_count - gone
        return Audit(received, duplicates, dropped, crashed, in_flight)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able snapshot (for the learner's checkpoint)."""
        with self._lock:
            return {
                "version": 1,
                "streams": [
                    {
                        "actor_id": a,
                        "stream": s,
                        "received": [list(r) for r in got.ranges()],
                        "duplicates": self._dups.get((a, s), 0),
                        "numbered": self._numbered.get((a, s), 0),
                        "dropped": self._dropped.get((a, s), 0),
                    }
                    for (a, s), got in sorted(self._got.items())
                ],
                "epochs": dict(sorted(self._epochs.items())),
                "retired": dict(self._retired),
            }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SeqLedger:
        if data.get("version") != 1:
            raise ValueError(f"ledger format version {data.get('version')!r}, this build reads 1")
        ledger = cls()
        for entry in data["streams"]:
            key = (str(entry["actor_id"]), str(entry["stream"]))
            ledger._got[key] = RangeSet([(int(lo), int(hi)) for lo, hi in entry["received"]])
            ledger._dups[key] = int(entry["duplicates"])
            ledger._numbered[key] = int(entry["numbered"])
            ledger._dropped[key] = int(entry.get("dropped", 0))
            if entry["received"]:
                ledger._delivered.add(key[0])
        ledger._epochs = {str(a): str(s) for a, s in data.get("epochs", {}).items()}
        for name, value in data.get("retired", {}).items():
            if name in ledger._retired:
                ledger._retired[name] = int(value)
        return ledger
