"""The transition stream's actor side: numbered, acknowledged, resent, never lost silently.

:class:`TransitionSender`: ``send(batch)`` only appends to a bounded
in-memory hand-off queue and returns; a background thread numbers each batch in
this actor's stream, encodes it, keeps it until the learner acknowledges it (in
memory up to ``max_inflight``, then in a bounded disk :class:`Spool`), sends at
most ``window`` unacknowledged batches at a time, and resends everything
unacknowledged whenever the link comes back (a new learner session, a rebuilt
socket, or an ack overdue). A stream is one incarnation of one actor, numbered
from 0; spool files a previous incarnation left behind are sent first. A batch is
the sender's responsibility from the moment it is numbered (and, with write-ahead,
on disk): a process killed before that, a few milliseconds after ``send``, loses it
unnumbered, as it loses the transitions not yet gathered into a batch.

A learner that has heard a newer process with the same actor id fences this one: the
sender then logs it loudly, stops pinging, sending and taking batches (``stats()["fenced"]``),
spools what it had queued, and leaves what is unacknowledged in the spool for the next start.

The learner's side is :mod:`.transition_receiver`; the socket loop is :mod:`.link`'s.
"""

from __future__ import annotations

import collections
import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from robotrl.config.transport import TransportConfig
from robotrl.core.batch import TransitionBatch
from robotrl.core.fsync import Fsync
from robotrl.core.log_limit import EveryFewSeconds
from robotrl.transport import protocol as p
from robotrl.transport.background import Counters, log_rejection
from robotrl.transport.heartbeat import Liveness
from robotrl.transport.link import POLL_MS, Clock, LinkClient, client_options
from robotrl.transport.sockets import CONTROL_LIMITS
from robotrl.transport.spool import Spool, SpoolFullError
from robotrl.wire.auth import ClientKeys
from robotrl.wire.codec import Frame, Message, WireError, encode
from robotrl.wire.messages import TRANSITIONS, joined_batches_to_message, packed_non_finite
from robotrl.wire.packed_columns import PackedDims

log = logging.getLogger(__name__)


def _joinable(a: TransitionBatch, b: TransitionBatch) -> bool:
    """Whether ``b`` can follow ``a`` in one batch: the same dimensions and camera frames."""
    return (
        a.state.shape[1:] == b.state.shape[1:]
        and a.action.shape[1:] == b.action.shape[1:]
        and {c: i.shape[1:] for c, i in a.images.items()} == {c: i.shape[1:] for c, i in b.images.items()}
    )


_last_stream_ms = 0
_stream_ms_lock = threading.Lock()


def new_stream_id() -> str:
    """A stream id that sorts by creation time (so old spool files go first) and is unique.

    Within one process each id's millisecond is past the one before: two senders made in the
    same millisecond would otherwise order at random, and the later could be fenced by the
    earlier (processes started in the same millisecond are not ordered; nothing can order them).
    A burst of n ids runs up to n ms ahead of the clock: a process makes one per sender, so it
    never matters; nothing should draw ids by the thousand from it.
    """
    global _last_stream_ms
    with _stream_ms_lock:
        _last_stream_ms = max(time.time_ns() // 1_000_000, _last_stream_ms + 1)
        ms = _last_stream_ms
    return f"{ms:012x}{secrets.token_hex(3)}"


class ActorFencedError(RuntimeError):
    """A newer process with this actor id has taken over: this one must stop (its batches are
    in the spool, sent by the actor id's next process)."""


@dataclass
class _Entry:
    """One numbered batch awaiting its ack."""

    stream: str
    seq: int
    frames: list[Frame] | None  # None while it lives only in the spool
    path: Path | None
    batches: int  # the batches handed to ``send`` that it joins
    sent_at: float | None = None


class TransitionSender:
    """Actor side of the transition stream. ``send`` never waits on the network."""

    def __init__(
        self,
        endpoint: str,
        actor_id: str,
        *,
        spool_dir: str | Path | None = None,
        spool_max_bytes: int = 2 << 30,
        max_queue: int = 1024,
        max_inflight: int = 256,
        window: int = 16,
        heartbeat_s: float = 1.0,
        peer_timeout_s: float = 5.0,
        keys: ClientKeys | None = None,
        write_ahead: bool = False,
        fsync: Fsync | None = None,
        coalesce_bytes: int = 0,
        on_numbered: Callable[[str, int, int], None] | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        """``on_numbered(stream, seq, rows)`` runs on the I/O thread once a batch is numbered
        and kept (on disk first, with write-ahead): what an audit of a crash counts as handed
        over, since from then on the learner's ledger accounts for the batch. ``fsync``: how
        spool files reach the disk (default: fsynced). ``coalesce_bytes``: batches queued behind
        one another go out joined, as messages of up to this many bytes (0: one message per
        batch; ``transport.coalesce_kb`` sets it for an actor)."""
        if not actor_id:
            raise ValueError("actor_id must not be empty")
        self.endpoint = endpoint
        self.actor_id = actor_id
        self.stream = new_stream_id()
        self._clock = clock
        self._max_queue = max_queue
        self._max_inflight = max_inflight
        self._window = window
        self._ack_timeout_s = 2 * peer_timeout_s
        self._live = Liveness(heartbeat_s, peer_timeout_s, clock)
        self._link = LinkClient(
            endpoint,
            keys,
            self,
            self._live,
            who=actor_id,
            peer="learner",
            thread_name=f"transitions-{actor_id}",
            limits=CONTROL_LIMITS,  # the learner only ever answers with pongs and acks
        )
        self._spool = Spool(Path(spool_dir) / actor_id, spool_max_bytes, fsync) if spool_dir else None
        self._drops = EveryFewSeconds(log, logging.WARNING, clock=clock)
        self._write_ahead = write_ahead and self._spool is not None
        self._on_numbered = on_numbered
        self._coalesce_bytes = coalesce_bytes
        self._alone = 0  # queued batches to take one by one (a joined batch held NaN)
        self._handoff: collections.deque[TransitionBatch] = collections.deque()
        self._entries: collections.OrderedDict[tuple[str, int], _Entry] = collections.OrderedDict()
        self._in_memory = 0
        self._unacked = 0  # batches in the entries (a joined message holds several)
        self._next_seq = 0
        self._dropped_seqs = 0  # numbered, then given up: what pings tell the learner's ledger
        self._numbering = False
        self._learner_session: str | None = None
        self._fenced = threading.Event()
        self._counts = Counters(
            "queued",
            "refused",
            "sent",
            "resent",
            "acked",
            "spooled",
            "dropped",
            "reconnects",
            "unjournaled",
            "non_finite",
            "joined",
        )
        self._stop = threading.Event()
        self._link.start()

    @classmethod
    def from_config(cls, cfg: TransportConfig, actor_id: str, **overrides: Any) -> TransitionSender:
        kwargs: dict[str, Any] = {
            **client_options(cfg, actor_id),
            "spool_dir": cfg.spool_dir,
            "spool_max_bytes": cfg.spool_max_mb << 20,
            "max_inflight": cfg.max_inflight_batches,
            "window": cfg.send_window,
            "write_ahead": cfg.write_ahead,
            "fsync": Fsync(cfg.fsync),
            "coalesce_bytes": cfg.coalesce_kb << 10,
        }
        kwargs.update(overrides)
        return cls(cfg.transitions_endpoint, actor_id, **kwargs)

    # -- caller side (the actor's control loop) ------------------------------------------

    def send(self, item: TransitionBatch) -> bool:
        """Queue ``item`` (do not modify its arrays afterwards); False when the queue is full."""
        if item.actor_id != self.actor_id:
            raise ValueError(f"batch of actor {item.actor_id!r} sent through the sender of {self.actor_id!r}")
        if len(self._handoff) >= self._max_queue or self._stop.is_set() or self._fenced.is_set():
            self._counts.add("refused")
            return False
        self._handoff.append(item)
        self._counts.add("queued")
        self._link.wake()
        return True

    def backlog(self) -> int:
        """Batches queued or awaiting their ack: a producer that may run ahead of the link
        (a benchmark, a replay) keeps this bounded; the control loop just calls ``send``."""
        return len(self._handoff) + self._unacked

    def stats(self) -> dict[str, Any]:
        """Counters of batches as ``send`` took them (a joined message counts each batch it
        holds; all acknowledged: ``acked == queued``), but ``sent`` and ``resent``, which count
        messages; ``joined``: batches that travelled inside an earlier one's message."""
        out: dict[str, Any] = self._counts.snapshot()
        out["unacked"] = self._unacked
        out["learner_alive"] = self._live.alive()
        out["stream"] = self.stream
        out["fenced"] = self._fenced.is_set()
        return out

    def flush(self, timeout_s: float, *, while_acked: bool = False) -> bool:
        """Wait until every queued batch is acknowledged; False at the deadline, or once fenced
        and every queued batch is numbered (and spooled, for the next start). ``while_acked``:
        each acknowledgement moves the deadline to ``timeout_s`` from then, so a learner still
        taking a backlog is waited for and one that stopped answering is not."""
        deadline = self._clock() + timeout_s
        acked = self._counts.snapshot()["acked"]
        while self._handoff or self._entries or self._numbering:
            now = self._clock()  # before the count: an ack counted by now moves this deadline
            if while_acked and (now_acked := self._counts.snapshot()["acked"]) != acked:
                acked, deadline = now_acked, now + timeout_s
            if now >= deadline or (self._fenced.is_set() and not self._handoff):
                return False
            self._stop.wait(0.01)
        return True

    def close(self) -> None:
        """Stop the I/O thread. Unacknowledged batches in the spool (all of them with
        ``write_ahead``) are sent by the next incarnation; those only in memory are lost (the
        learner counts them as lost to the actor's end)."""
        self._stop.set()
        self._link.close()

    # -- I/O thread: the link's ClientHandler ----------------------------------------------

    def on_start(self) -> None:
        """Queue what earlier incarnations of this actor spooled and never got acknowledged."""
        if self._spool is None:
            return
        for path in self._spool.files():
            loaded = self._spool.load(path)
            if loaded is None:
                continue
            _, message = loaded
            stream, batches = message.meta.get("stream"), message.meta.get("batches", 1)
            if message.kind != TRANSITIONS or message.sender != self.actor_id or not isinstance(stream, str):
                log.warning("spool: %s is not a transition batch of %s; dropped", path, self.actor_id)
                self._spool.remove(path)
                continue
            batches = batches if isinstance(batches, int) and batches > 0 else 1
            self._keep(_Entry(stream, message.seq, None, path, batches))
        if self._entries:
            log.info("%s: %d spooled batches from earlier runs to send", self.actor_id, len(self._entries))

    def before_poll(self) -> None:
        self._numbering = True  # a batch between the hand-off queue and the entries: not flushed
        try:
            self._take_handoff()
        finally:
            self._numbering = False

    def wait_ms(self) -> int:
        more = bool(self._handoff) and self._in_memory < self._max_inflight
        return 0 if more else POLL_MS  # else wait for acks

    def beat(self) -> None:
        if self._fenced.is_set():
            return
        ping = p.control(
            p.PING,
            self.actor_id,
            stream=self.stream,
            next=self._next_seq,
            dropped=self._dropped_seqs,
        )
        self._link.send(encode(ping))  # not connected yet: the missing pong tells us so

    def on_message(self, message: Message) -> None:
        if message.kind == p.PONG:
            self._on_pong(p.meta_str(message, "session"))
        elif message.kind == p.ACK:
            self._live.heard()
            self._on_ack(p.meta_str(message, "stream"), p.ack_ranges(message))
        elif message.kind == p.FENCED:
            self._on_fenced(p.meta_str(message, "stream"), p.meta_str(message, "epoch"))
        else:
            raise WireError("schema", f"unexpected kind {message.kind!r} from the learner")

    def on_rejected(self, error: WireError) -> None:
        log_rejection(self._counts, error, self.actor_id)

    def on_reconnect(self) -> None:
        self._counts.add("reconnects")
        self._mark_all_unsent()

    def after_poll(self) -> None:
        if self._live.alive() and not self._fenced.is_set():
            self._send_window()

    def _on_fenced(self, stream: str, epoch: str) -> None:
        if stream != self.stream:
            raise WireError("schema", f"fenced: names stream {stream!r}, not this process's")
        if self._fenced.is_set():
            return
        self._fenced.set()
        self._take_handoff()
        lost = self._spool_in_memory()
        log.error(
            "%s: FENCED: a newer process with actor id %s (stream %s) has taken over from this one "
            "(stream %s); this process stops. %d unacknowledged batches stay in the spool for the "
            "id's next process (%d could not be spooled); run one process per actor id",
            self.actor_id,
            self.actor_id,
            epoch,
            self.stream,
            len(self._entries) - lost,
            lost,
        )

    def _spool_in_memory(self) -> int:
        """Write every unacknowledged batch held only in memory to the spool; the count that
        could not be written (no spool, or it is full)."""
        lost = 0
        for key, entry in self._entries.items():
            if entry.path is not None or entry.frames is None:
                continue
            try:
                if self._spool is None:
                    raise SpoolFullError("no spool")
                entry.path = self._spool.write(f"{key[0]}-{key[1]:016d}", entry.frames)
            except (SpoolFullError, OSError):
                lost += 1
        return lost

    @property
    def fenced(self) -> bool:
        """Whether a newer process with this actor id has taken over (this one must stop)."""
        return self._fenced.is_set()

    def _take_handoff(self) -> None:
        """Number and encode queued batches: into memory while there is room; to the spool
        only while the learner is away or the hand-off queue is half full (a slow learner).
        Without a spool, batches wait in the hand-off queue until it is half full, and only
        then are dropped (numbered first, so the learner's ledger counts them)."""
        while self._handoff:
            room = self._in_memory < self._max_inflight
            waits = (self._live.alive() and not self._fenced.is_set()) or self._spool is None
            if not room and waits and len(self._handoff) < self._max_queue // 2:
                return
            seq = self._next_seq
            self._next_seq += 1
            try:
                frames, rows, bad, batches = self._take_message(seq)
            except WireError as exc:  # raised for one batch alone: a joined one is taken apart
                self._dropped(seq, 1, f"cannot be encoded ({exc}); dropped", loudly=True)
                continue
            if bad:  # the learner would refuse it, and never acknowledge it
                self._dropped(seq, 1, f"holds NaN or inf in {bad}; dropped, not sent", loudly=True)
                self._counts.add("non_finite")
                continue
            key = (self.stream, seq)
            if self._in_memory < self._max_inflight:
                path = self._journal(key, frames, batches) if self._write_ahead else None
                self._keep(_Entry(self.stream, seq, frames, path, batches))
                self._in_memory += 1
                self._numbered(seq, rows)
                continue
            if self._spool is not None:
                try:
                    path = self._spool.write(f"{self.stream}-{seq:016d}", frames)
                    self._keep(_Entry(self.stream, seq, None, path, batches))
                    self._counts.add("spooled", batches)
                    self._numbered(seq, rows)
                    continue
                except (SpoolFullError, OSError) as exc:
                    self._dropped(seq, batches, f"memory and spool full ({exc})")
                    continue
            self._dropped(seq, batches, "memory full and no spool")

    def _take_message(self, seq: int) -> tuple[list[Frame], int, list[str], int]:
        """The oldest queued batch encoded as message ``seq``, joined with those queued behind it
        while they fit in one message of ``coalesce_bytes`` (same dimensions and cameras); its
        rows, the fields in it that hold NaN or infinity, and how many batches it joins: a
        backlog travels in few messages, each numbered, spooled and acknowledged once. Joined
        batches that hold NaN or inf, or do not encode, are taken apart again: they go alone, so
        only the one at fault is dropped (:class:`WireError` for it)."""
        group = [self._handoff.popleft()]
        if self._alone:
            self._alone -= 1
        elif self._coalesce_bytes:
            size = group[0].nbytes
            while self._handoff:
                nxt = self._handoff[0]
                size += nxt.nbytes
                if size > self._coalesce_bytes or not _joinable(group[0], nxt):
                    break
                group.append(self._handoff.popleft())
        if len(group) > 1:
            try:
                plain = joined_batches_to_message(group, seq)
                if not packed_non_finite(plain):
                    frames, rows = self._encoded(plain, len(group))
                    self._counts.add("joined", len(group) - 1)
                    return frames, rows, [], len(group)
            except WireError:
                pass
            self._handoff.extendleft(reversed(group[1:]))
            self._alone = len(group) - 1
        plain = joined_batches_to_message(group[:1], seq)
        bad = packed_non_finite(plain)
        return *self._encoded(plain, 1), bad, 1

    def _encoded(self, plain: Message, batches: int) -> tuple[list[Frame], int]:
        """The frames of ``plain`` as this stream's message of ``batches`` batches, and its rows."""
        frames = encode(replace(plain, meta={**plain.meta, "stream": self.stream, "batches": batches}))
        return frames, PackedDims.parse(plain.meta["dims"]).rows

    def _dropped(self, seq: int, batches: int, why: str, loudly: bool = False) -> None:
        """A numbered message given up: counted (pings tell the learner's ledger), logged
        sparingly, or each time (``loudly``) when the batch itself is at fault."""
        self._dropped_seqs += 1
        self._counts.add("dropped", batches)
        if loudly:
            log.error("%s: batch %d %s", self.actor_id, seq, why)
        else:
            self._drops.event("%s: batch %d dropped, %s", self.actor_id, seq, why)

    def _numbered(self, seq: int, rows: int) -> None:
        if self._on_numbered is None:
            return
        try:
            self._on_numbered(self.stream, seq, rows)
        except Exception:  # an audit hook must not stop the transport
            log.exception("%s: on_numbered failed for batch %d", self.actor_id, seq)

    def _journal(self, key: tuple[str, int], frames: list[Frame], batches: int) -> Path | None:
        """Write-ahead copy of an in-memory batch, so a restarted actor resends it; None when
        the spool refuses (the batch is then kept in memory only, and counted)."""
        assert self._spool is not None
        try:
            return self._spool.write(f"{key[0]}-{key[1]:016d}", frames)
        except (SpoolFullError, OSError) as exc:
            self._counts.add("unjournaled", batches)
            n = self._counts.snapshot()["unjournaled"]
            if n <= 5 or n % 100 == 0:
                log.warning("%s: batch %d kept in memory only (%s, #%d)", self.actor_id, key[1], exc, n)
            return None

    def _on_pong(self, session: str) -> None:
        was_alive = self._live.alive()
        self._live.heard()
        if session != self._learner_session or not was_alive:
            if self._learner_session is not None and session != self._learner_session:
                log.info(
                    "%s: learner restarted (session %s); resending %d unacked batches",
                    self.actor_id,
                    session,
                    self._unacked,
                )
            self._learner_session = session
            self._mark_all_unsent()

    def _on_ack(self, stream: str, ranges: list[tuple[int, int]]) -> None:
        for lo, hi in ranges:
            if hi - lo > len(self._entries):
                keys = [k for k in self._entries if k[0] == stream and lo <= k[1] < hi]
            else:
                keys = [(stream, s) for s in range(lo, hi) if (stream, s) in self._entries]
            for key in keys:
                entry = self._entries[key]
                if entry.frames is not None:
                    self._in_memory -= 1
                if entry.path is not None and self._spool is not None:
                    self._spool.remove(entry.path)
                self._counts.add("acked", entry.batches)
                self._forget(entry)  # last: flush() sees an empty ledger only once it is counted

    def _keep(self, entry: _Entry) -> None:
        self._entries[(entry.stream, entry.seq)] = entry
        self._unacked += entry.batches

    def _forget(self, entry: _Entry) -> None:
        del self._entries[(entry.stream, entry.seq)]
        self._unacked -= entry.batches

    def _mark_all_unsent(self) -> None:
        for entry in self._entries.values():
            entry.sent_at = None

    def _send_window(self) -> None:
        now = self._clock()
        outstanding = 0
        for entry in self._entries.values():
            if entry.sent_at is not None and now - entry.sent_at < self._ack_timeout_s:
                outstanding += 1
                if outstanding >= self._window:
                    return
                continue
            frames = entry.frames
            if frames is None:
                assert self._spool is not None and entry.path is not None
                loaded = self._spool.load(entry.path)
                if loaded is None:
                    self._forget(entry)
                    self._counts.add("dropped", entry.batches)  # the spool logged why
                    self._dropped_seqs += entry.stream == self.stream  # the ping speaks for this stream
                    return  # the dict changed under the loop; continue on the next pass
                frames = list(loaded[0])
            if not self._link.send(frames, copy=False):
                return
            self._counts.add("resent" if entry.sent_at is not None else "sent")
            entry.sent_at = now
            outstanding += 1
            if outstanding >= self._window:
                return
