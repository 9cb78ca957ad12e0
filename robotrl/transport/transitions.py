"""The transition stream, actor to learner: numbered, acknowledged, resent, never lost silently.

Actor side, :class:`TransitionSender`: ``send(batch)`` only appends to a bounded
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

Learner side, :class:`TransitionReceiver`: a background thread receives,
validates (the codec, then the batch schema), drops duplicates by sequence
number, answers heartbeats and queues batches for ``recv``. A batch is
acknowledged when the application asks for the next one (or calls
:meth:`TransitionReceiver.commit`), so a learner killed while holding a batch
gets it again after its restart. Its :class:`~robotrl.transport.ledger.SeqLedger`
accounts for every sequence number of every stream (received, duplicate, missing)
and can be checkpointed and restored.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import queue
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq

from robotrl.config.transport import TransportConfig
from robotrl.core.batch import TransitionBatch
from robotrl.transport import protocol as p
from robotrl.transport.background import Counters, lower_priority
from robotrl.transport.heartbeat import Liveness
from robotrl.transport.ledger import SeqLedger
from robotrl.transport.sockets import bind, client_socket, server_socket, start_authenticator
from robotrl.transport.spool import Spool, SpoolFullError
from robotrl.wire.auth import ClientKeys, ServerKeys, client_keys, server_keys
from robotrl.wire.codec import REASONS, Frame, Message, WireError, decode, encode
from robotrl.wire.messages import (
    TRANSITIONS,
    message_to_transition_batch,
    non_finite_arrays,
    transition_batch_to_message,
)

log = logging.getLogger(__name__)

Clock = Callable[[], float]
_POLL_MS = 5


def new_stream_id() -> str:
    """A stream id that sorts by creation time (so old spool files go first) and is unique."""
    return f"{time.time_ns() // 1_000_000:012x}{secrets.token_hex(3)}"


def _log_rejection(counts: Counters, reason: str, detail: str, who: str) -> None:
    """Count a rejected message; log the first few of each reason, then every 100th."""
    counts.add(f"rejected_{reason}")
    n = counts.snapshot()[f"rejected_{reason}"]
    if n <= 5 or n % 100 == 0:
        log.warning("%s: rejected message (%s, #%d): %s", who, reason, n, detail)


@dataclass
class _Entry:
    """One numbered batch awaiting its ack."""

    stream: str
    seq: int
    frames: list[Frame] | None  # None while it lives only in the spool
    path: Path | None
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
        on_numbered: Callable[[str, int, int], None] | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        """``on_numbered(stream, seq, rows)`` runs on the I/O thread once a batch is numbered
        and kept (on disk first, with write-ahead): what an audit of a crash counts as handed
        over, since from then on the learner's ledger accounts for the batch."""
        if not actor_id:
            raise ValueError("actor_id must not be empty")
        self.endpoint = endpoint
        self.actor_id = actor_id
        self.stream = new_stream_id()
        self._keys = keys
        self._clock = clock
        self._max_queue = max_queue
        self._max_inflight = max_inflight
        self._window = window
        self._ack_timeout_s = 2 * peer_timeout_s
        self._live = Liveness(heartbeat_s, peer_timeout_s, clock)
        self._spool = Spool(Path(spool_dir) / actor_id, spool_max_bytes) if spool_dir else None
        self._write_ahead = write_ahead and self._spool is not None
        self._on_numbered = on_numbered
        self._handoff: collections.deque[TransitionBatch] = collections.deque()
        self._entries: collections.OrderedDict[tuple[str, int], _Entry] = collections.OrderedDict()
        self._in_memory = 0
        self._next_seq = 0
        self._learner_session: str | None = None
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
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"transitions-{actor_id}", daemon=True)
        self._thread.start()

    @classmethod
    def from_config(cls, cfg: TransportConfig, actor_id: str, **overrides: Any) -> TransitionSender:
        kwargs: dict[str, Any] = {
            "spool_dir": cfg.spool_dir,
            "spool_max_bytes": cfg.spool_max_mb << 20,
            "max_inflight": cfg.max_inflight_batches,
            "window": cfg.send_window,
            "heartbeat_s": cfg.heartbeat_s,
            "peer_timeout_s": cfg.peer_timeout_s,
            "keys": client_keys(cfg.keys_dir) if cfg.curve else None,
            "write_ahead": cfg.write_ahead,
        }
        kwargs.update(overrides)
        return cls(cfg.transitions_endpoint, actor_id, **kwargs)

    # -- caller side (the actor's control loop) ------------------------------------------

    def send(self, item: TransitionBatch) -> bool:
        """Queue ``item`` (do not modify its arrays afterwards); False when the queue is full."""
        if item.actor_id != self.actor_id:
            raise ValueError(f"batch of actor {item.actor_id!r} sent through the sender of {self.actor_id!r}")
        if len(self._handoff) >= self._max_queue or self._stop.is_set():
            self._counts.add("refused")
            return False
        self._handoff.append(item)
        self._counts.add("queued")
        return True

    def backlog(self) -> int:
        """Batches queued or awaiting their ack: a producer that may run ahead of the link
        (a benchmark, a replay) keeps this bounded; the control loop just calls ``send``."""
        return len(self._handoff) + len(self._entries)

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = self._counts.snapshot()
        out["unacked"] = len(self._entries)
        out["learner_alive"] = self._live.alive()
        out["stream"] = self.stream
        return out

    def flush(self, timeout_s: float) -> bool:
        """Wait until every queued batch is acknowledged; False at the deadline."""
        deadline = time.monotonic() + timeout_s
        while self._handoff or self._entries:
            if time.monotonic() >= deadline:
                return False
            self._stop.wait(0.01)
        return True

    def close(self) -> None:
        """Stop the I/O thread. Unacknowledged batches in the spool (all of them with
        ``write_ahead``) are sent by the next incarnation; those only in memory are lost (the
        learner counts them as lost to the actor's end)."""
        self._stop.set()
        self._thread.join(timeout=5.0)

    # -- I/O thread -----------------------------------------------------------------------

    def _run(self) -> None:
        lower_priority()  # this thread shares the actor's process with its control loop
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        sock = self._connect(ctx)
        self._load_spool()
        try:
            while not self._stop.is_set():
                self._take_handoff()
                more = bool(self._handoff) and self._in_memory < self._max_inflight
                if sock.poll(0 if more else _POLL_MS, zmq.POLLIN):  # else wait for acks
                    self._receive(sock)
                if self._live.beat_due():
                    self._send_ping(sock)
                if self._live.last_heard is not None and not self._live.alive():
                    log.warning(
                        "%s: learner silent for %.1fs; reconnecting", self.actor_id, self._live.timeout_s
                    )
                    sock.close(linger=0)
                    sock = self._connect(ctx)
                    self._counts.add("reconnects")
                    self._mark_all_unsent()
                if self._live.alive():
                    self._send_window(sock)
        finally:
            sock.close(linger=0)
            ctx.term()

    def _connect(self, ctx: zmq.Context[zmq.Socket[bytes]]) -> zmq.Socket[bytes]:
        sock = client_socket(ctx, zmq.DEALER, self._keys)
        sock.connect(self.endpoint)
        self._live.forget()
        return sock

    def _load_spool(self) -> None:
        """Queue what earlier incarnations of this actor spooled and never got acknowledged."""
        if self._spool is None:
            return
        for path in self._spool.files():
            loaded = self._spool.load(path)
            if loaded is None:
                continue
            _, message = loaded
            stream = message.meta.get("stream")
            if message.kind != TRANSITIONS or message.sender != self.actor_id or not isinstance(stream, str):
                log.warning("spool: %s is not a transition batch of %s; dropped", path, self.actor_id)
                self._spool.remove(path)
                continue
            self._entries[(stream, message.seq)] = _Entry(stream, message.seq, None, path)
        if self._entries:
            log.info("%s: %d spooled batches from earlier runs to send", self.actor_id, len(self._entries))

    def _take_handoff(self) -> None:
        """Number and encode queued batches: into memory while there is room; to the spool
        only while the learner is away or the hand-off queue is half full (a slow learner).
        Without a spool, batches wait in the hand-off queue until it is half full, and only
        then are dropped (numbered first, so the learner's ledger counts them)."""
        while self._handoff:
            room = self._in_memory < self._max_inflight
            waits = self._live.alive() or self._spool is None
            if not room and waits and len(self._handoff) < self._max_queue // 2:
                return
            batch = self._handoff.popleft()
            seq = self._next_seq
            self._next_seq += 1
            plain = transition_batch_to_message(batch, seq)
            bad = non_finite_arrays(plain)
            if bad:  # the learner would refuse it, and never acknowledge it
                log.error("%s: batch %d holds NaN or inf in %s; dropped, not sent", self.actor_id, seq, bad)
                self._counts.add("dropped")
                self._counts.add("non_finite")
                continue
            message = Message(
                plain.kind, plain.sender, seq, plain.arrays, {**plain.meta, "stream": self.stream}
            )
            try:
                frames = encode(message)
            except WireError as exc:
                log.error("%s: batch %d cannot be encoded (%s); dropped", self.actor_id, seq, exc)
                self._counts.add("dropped")
                continue
            key = (self.stream, seq)
            if self._in_memory < self._max_inflight:
                path = self._journal(key, frames) if self._write_ahead else None
                self._entries[key] = _Entry(self.stream, seq, frames, path)
                self._in_memory += 1
                self._numbered(seq, len(batch))
                continue
            if self._spool is not None:
                try:
                    path = self._spool.write(f"{self.stream}-{seq:016d}", frames)
                    self._entries[key] = _Entry(self.stream, seq, None, path)
                    self._counts.add("spooled")
                    self._numbered(seq, len(batch))
                    continue
                except SpoolFullError as exc:
                    log.warning("%s: %s; batch %d dropped", self.actor_id, exc, seq)
                except OSError as exc:
                    log.error("%s: spool write failed (%s); batch %d dropped", self.actor_id, exc, seq)
            self._counts.add("dropped")

    def _numbered(self, seq: int, rows: int) -> None:
        if self._on_numbered is None:
            return
        try:
            self._on_numbered(self.stream, seq, rows)
        except Exception:  # an audit hook must not stop the transport
            log.exception("%s: on_numbered failed for batch %d", self.actor_id, seq)

    def _journal(self, key: tuple[str, int], frames: list[Frame]) -> Path | None:
        """Write-ahead copy of an in-memory batch, so a restarted actor resends it; None when
        the spool refuses (the batch is then kept in memory only, and counted)."""
        assert self._spool is not None
        try:
            return self._spool.write(f"{key[0]}-{key[1]:016d}", frames)
        except (SpoolFullError, OSError) as exc:
            self._counts.add("unjournaled")
            n = self._counts.snapshot()["unjournaled"]
            if n <= 5 or n % 100 == 0:
                log.warning("%s: batch %d kept in memory only (%s, #%d)", self.actor_id, key[1], exc, n)
            return None

    def _send_ping(self, sock: zmq.Socket[bytes]) -> None:
        ping = p.control(
            p.PING,
            self.actor_id,
            stream=self.stream,
            next=self._next_seq,
            dropped=self._counts.snapshot()["dropped"],
        )
        with contextlib.suppress(zmq.Again):  # no connection yet: the missing pong tells us so
            sock.send_multipart(encode(ping), flags=zmq.NOBLOCK)

    def _receive(self, sock: zmq.Socket[bytes]) -> None:
        while True:
            try:
                frames = sock.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            try:
                message = decode(frames)
                if message.kind == p.PONG:
                    self._on_pong(p.meta_str(message, "session"))
                elif message.kind == p.ACK:
                    self._live.heard()
                    self._on_ack(p.meta_str(message, "stream"), p.ack_ranges(message))
                else:
                    raise WireError("schema", f"unexpected kind {message.kind!r} from the learner")
            except WireError as exc:
                _log_rejection(self._counts, exc.reason, str(exc), self.actor_id)

    def _on_pong(self, session: str) -> None:
        was_alive = self._live.alive()
        self._live.heard()
        if session != self._learner_session or not was_alive:
            if self._learner_session is not None and session != self._learner_session:
                log.info(
                    "%s: learner restarted (session %s); resending %d unacked batches",
                    self.actor_id,
                    session,
                    len(self._entries),
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
                entry = self._entries.pop(key)
                if entry.frames is not None:
                    self._in_memory -= 1
                if entry.path is not None and self._spool is not None:
                    self._spool.remove(entry.path)
                self._counts.add("acked")

    def _mark_all_unsent(self) -> None:
        for entry in self._entries.values():
            entry.sent_at = None

    def _send_window(self, sock: zmq.Socket[bytes]) -> None:
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
                    self._entries.pop((entry.stream, entry.seq))
                    self._counts.add("dropped")
                    return  # the dict changed under the loop; continue on the next pass
                frames = list(loaded[0])
            try:
                sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            self._counts.add("resent" if entry.sent_at is not None else "sent")
            entry.sent_at = now
            outstanding += 1
            if outstanding >= self._window:
                return


@dataclass(frozen=True)
class Received:
    """A batch as handed to the learner, with where it sits in its actor's stream."""

    actor_id: str
    stream: str
    seq: int
    batch: TransitionBatch


class TransitionReceiver:
    """Learner side of the transition stream: binds ``endpoint``; ``recv`` hands out batches."""

    def __init__(
        self,
        endpoint: str,
        *,
        ledger: SeqLedger | None = None,
        max_queue: int = 4096,
        heartbeat_s: float = 1.0,
        peer_timeout_s: float = 5.0,
        keys: ServerKeys | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.ledger = ledger if ledger is not None else SeqLedger()
        self.session = secrets.token_hex(8)
        self._keys = keys
        self._clock = clock
        self._heartbeat_s = heartbeat_s
        self._peer_timeout_s = peer_timeout_s
        self._queue: queue.Queue[Received] = queue.Queue(maxsize=max_queue)
        self._queued: set[tuple[str, str, int]] = set()
        self._queued_lock = threading.Lock()
        self._to_ack: collections.deque[Received] = collections.deque()
        self._held: Received | None = None
        self._actors: dict[str, Liveness] = {}
        self._routes: dict[str, bytes] = {}  # actor -> its newest connection, where acks go
        self._actors_lock = threading.Lock()
        self._counts = Counters("received", "duplicates", "overflow", *(f"rejected_{r}" for r in REASONS))
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.endpoint = endpoint
        self._thread = threading.Thread(
            target=self._run, args=(endpoint,), name="transitions-rx", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(10.0) or self._error is not None:
            self._stop.set()
            raise RuntimeError(f"transition receiver could not bind {endpoint}: {self._error}")

    @classmethod
    def from_config(cls, cfg: TransportConfig, **overrides: Any) -> TransitionReceiver:
        kwargs: dict[str, Any] = {
            "heartbeat_s": cfg.heartbeat_s,
            "peer_timeout_s": cfg.peer_timeout_s,
            "keys": server_keys(cfg.keys_dir) if cfg.curve else None,
        }
        kwargs.update(overrides)
        return cls(cfg.transitions_endpoint, **kwargs)

    # -- application side -----------------------------------------------------------------

    def recv(self, timeout_s: float) -> TransitionBatch | None:
        """The next new batch, or None after ``timeout_s``; acknowledges the batch handed out before."""
        item = self.recv_item(timeout_s)
        return item.batch if item is not None else None

    def recv_item(self, timeout_s: float) -> Received | None:
        """As :meth:`recv`, with the batch's actor, stream and sequence number."""
        self.commit()
        try:
            item = self._queue.get(timeout=max(0.0, timeout_s))
        except queue.Empty:
            return None
        with self._queued_lock:
            self._queued.discard((item.actor_id, item.stream, item.seq))
        while not self.ledger.record(item.actor_id, item.stream, item.seq):
            self._counts.add("duplicates")  # already taken (a restored ledger); ack, skip
            self._to_ack.append(item)
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return None
            with self._queued_lock:
                self._queued.discard((item.actor_id, item.stream, item.seq))
        self._held = item
        return item

    def commit(self) -> None:
        """Acknowledge the batch handed out last (``recv`` does this itself)."""
        if self._held is not None:
            self._to_ack.append(self._held)
            self._held = None

    def stats(self) -> dict[str, int]:
        return self._counts.snapshot()

    def actors_alive(self) -> dict[str, bool]:
        """Every actor heard from, and whether it was heard within the peer timeout."""
        with self._actors_lock:
            return {a: live.alive() for a, live in self._actors.items()}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)

    # -- I/O thread -----------------------------------------------------------------------

    def _run(self, endpoint: str) -> None:
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        auth = None
        try:
            auth = start_authenticator(ctx, self._keys)
            sock = server_socket(ctx, zmq.ROUTER, self._keys)
            self.endpoint = bind(sock, endpoint)
        except Exception as exc:  # reported to the constructor, which raises
            self._error = exc
            self._ready.set()
            ctx.term()
            return
        self._ready.set()
        try:
            while not self._stop.is_set():
                if sock.poll(0 if self._to_ack else _POLL_MS, zmq.POLLIN):
                    self._receive(sock)
                self._flush_acks(sock)
        finally:
            sock.close(linger=0)
            if auth is not None:
                auth.stop()
            ctx.term()

    def _receive(self, sock: zmq.Socket[bytes]) -> None:
        for _ in range(256):
            try:
                frames = sock.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            route = frames[0].bytes
            try:
                message = decode(frames[1:])
                if message.kind == TRANSITIONS:
                    self._on_batch(route, message)
                elif message.kind == p.PING:
                    self._on_ping(sock, route, message)
                else:
                    raise WireError("schema", f"unexpected kind {message.kind!r} from an actor")
            except WireError as exc:
                _log_rejection(self._counts, exc.reason, str(exc), "learner transitions")

    def _heard(self, actor_id: str, route: bytes) -> None:
        self._routes[actor_id] = route
        with self._actors_lock:
            live = self._actors.get(actor_id)
            if live is None:
                live = self._actors[actor_id] = Liveness(self._heartbeat_s, self._peer_timeout_s, self._clock)
                log.info("learner transitions: actor %s connected", actor_id)
            live.heard()

    def _on_ping(self, sock: zmq.Socket[bytes], route: bytes, message: Message) -> None:
        stream = p.meta_str(message, "stream")
        dropped = message.meta.get("dropped", 0)
        self.ledger.numbered(
            message.sender,
            stream,
            p.meta_int(message, "next"),
            dropped if isinstance(dropped, int) and not isinstance(dropped, bool) and dropped >= 0 else 0,
        )
        self._heard(message.sender, route)
        self._send(sock, route, p.control(p.PONG, "learner", session=self.session))

    def _on_batch(self, route: bytes, message: Message) -> None:
        stream = p.meta_str(message, "stream")
        batch = message_to_transition_batch(message)
        self._heard(message.sender, route)
        item = Received(message.sender, stream, message.seq, batch)
        key = (message.sender, stream, message.seq)
        with self._queued_lock:
            queued = key in self._queued
        if queued or self.ledger.seen(*key):
            self._counts.add("duplicates")
            if not queued:
                self._to_ack.append(item)  # the actor missed our ack: send it again
            return
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self._counts.add("overflow")  # not acked: the actor resends it later
            return
        with self._queued_lock:
            self._queued.add(key)
        self._counts.add("received")

    def _flush_acks(self, sock: zmq.Socket[bytes]) -> None:
        if not self._to_ack:
            return
        groups: dict[tuple[str, str], list[int]] = {}
        while self._to_ack:
            item = self._to_ack.popleft()
            groups.setdefault((item.actor_id, item.stream), []).append(item.seq)
        for (actor_id, stream), seqs in groups.items():
            self._send(
                sock,
                self._routes[actor_id],
                p.control(p.ACK, "learner", stream=stream, ranges=p.to_ranges(seqs)),
            )

    @staticmethod
    def _send(sock: zmq.Socket[bytes], route: bytes, message: Message) -> None:
        with contextlib.suppress(zmq.ZMQError):  # the peer is gone or full; it pings again
            sock.send_multipart([route, *encode(message)], flags=zmq.NOBLOCK)
