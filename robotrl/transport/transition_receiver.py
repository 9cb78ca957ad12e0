"""The transition stream's learner side: validated, deduplicated, acknowledged once stored.

:class:`TransitionReceiver`: a background thread receives,
validates (the codec, then the batch schema), drops duplicates by sequence
number, answers heartbeats and queues batches for ``recv``. A batch is
acknowledged when the application asks for the next one (or calls
:meth:`TransitionReceiver.commit`), so a learner killed while holding a batch
gets it again after its restart. Its :class:`~robotrl.transport.ledger.SeqLedger`
accounts for every sequence number of every stream (received, duplicate, missing)
and can be checkpointed and restored. The actor's side is :mod:`.transitions`.

A peer gets state here (liveness, route, ledger entries) only by sending a valid batch:
a ping from an unknown actor is answered and forgotten. At most ``max_actors`` actors
are tracked (a new one replaces one gone silent, or is refused and resends later), and
batch numbers or pings reaching more than ``max_seq_ahead`` past a known stream's newest
batch (2**40 for a stream not known yet) are refused.

With CURVE, a batch or ping claiming an actor id other than the one its key speaks for is
refused (``refused_identity``). A second live process with an actor id fences the first
by the ledger's epoch: the older one's pings and batches are refused (``fenced``) and it
is told, so two processes never share one actor's acks.
"""

from __future__ import annotations

import collections
import logging
import queue
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

from robotrl.config.transport import TransportConfig
from robotrl.core.batch import TransitionBatch
from robotrl.transport import protocol as p
from robotrl.transport.background import PEER_LOG, Counters, log_rejection
from robotrl.transport.heartbeat import Liveness
from robotrl.transport.ledger import SeqLedger
from robotrl.transport.link import POLL_MS, Clock, LinkServer, server_options
from robotrl.wire.auth import ServerKeys
from robotrl.wire.codec import REASONS, Message, WireError, WireLimits, encode
from robotrl.wire.messages import TRANSITIONS, message_to_transition_batch

log = logging.getLogger(__name__)

_MAX_FENCED_ROUTES = 1024
"""Connections remembered as fenced; an older one forgotten is fenced again at its next ping."""


_FIRST_SEQ_CEILING = 1 << 40
"""The highest number a stream the ledger does not know yet may start from: a fresh learner
meets actors that have numbered millions of batches, never 2**40 (a century at 300 a second)."""


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
        max_actors: int = 64,
        max_seq_ahead: int = 1_000_000,
        max_batch_bytes: int = 64 << 20,
    ) -> None:
        self.ledger = ledger if ledger is not None else SeqLedger()
        self._max_actors = max_actors
        self._max_seq_ahead = max_seq_ahead
        self.session = secrets.token_hex(8)
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
        self._fenced_routes: collections.OrderedDict[bytes, str] = collections.OrderedDict()
        self._actors_lock = threading.Lock()
        self._counts = Counters(
            "received",
            "duplicates",
            "overflow",
            "refused_actors",
            "fenced",
            "refused_identity",
            *(f"rejected_{r}" for r in REASONS),
        )
        self._link = LinkServer(
            endpoint,
            keys,
            self,
            what="transition receiver",
            thread_name="transitions-rx",
            limits=WireLimits(max_total_bytes=max_batch_bytes),
        )
        self._link.start()
        self.endpoint = self._link.endpoint

    @classmethod
    def from_config(cls, cfg: TransportConfig, **overrides: Any) -> TransitionReceiver:
        kwargs = server_options(cfg)
        kwargs.update(
            max_actors=cfg.max_actors, max_seq_ahead=cfg.max_seq_ahead, max_batch_bytes=cfg.max_batch_mb << 20
        )
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
        while not self.ledger.record(item.actor_id, item.stream, item.seq):
            self._counts.add("duplicates")  # already taken (a restored ledger); ack, skip
            self._unqueue(item)
            self._to_ack.append(item)
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return None
        # Its key stays queued until commit or hand_back: a resend meanwhile is not acknowledged.
        self._held = item
        return item

    def commit(self) -> None:
        """Acknowledge the batch handed out last (``recv`` does this itself)."""
        if self._held is not None:
            self._to_ack.append(self._held)
            self._unqueue(self._held)
            self._held = None
            self._link.wake()

    def hand_back(self) -> None:
        """Return the batch handed out last unacknowledged (the learner could not journal it):
        forgotten by the ledger, so the actor, which keeps every unacknowledged batch, resends
        it and the resend is taken."""
        if self._held is not None:
            held, self._held = self._held, None
            self.ledger.forget(held.actor_id, held.stream, held.seq)
            self._unqueue(held)

    def _unqueue(self, item: Received) -> None:
        with self._queued_lock:
            self._queued.discard((item.actor_id, item.stream, item.seq))

    def stats(self) -> dict[str, int]:
        return self._counts.snapshot()

    def actors_alive(self) -> dict[str, bool]:
        """Every actor heard from, and whether it was heard within the peer timeout."""
        with self._actors_lock:
            return {a: live.alive() for a, live in self._actors.items()}

    def close(self, linger_s: float = 1.0) -> None:
        """Stop the link, after up to ``linger_s`` for its I/O thread to take the acknowledgements
        still queued and up to ``linger_s`` more for its socket to send them (an actor not told
        resends, and a learner restarted without a checkpoint would store the batch a second
        time). Best effort: an actor that has not read an acknowledgement when the link closes
        loses it (its socket drops what it holds for a peer gone) and resends; a learner restarted
        from the stop's checkpoint, whose ledger holds the batch, acknowledges the resend and
        skips it."""
        deadline = time.monotonic() + linger_s
        while self._to_ack and time.monotonic() < deadline:
            time.sleep(0.01)
        self._link.close(linger_s=linger_s)  # a thread that load held back leaves the socket time

    # -- I/O thread: the link's ServerHandler ----------------------------------------------

    def wait_ms(self) -> int:
        return 0 if self._to_ack else POLL_MS

    def on_message(self, route: bytes, message: Message, peer_id: str | None) -> None:
        if message.kind not in (TRANSITIONS, p.PING):
            raise WireError("schema", f"unexpected kind {message.kind!r} from an actor")
        if peer_id is not None and message.sender != peer_id:
            self._refuse_identity(message.sender, peer_id)
        elif message.kind == TRANSITIONS:
            self._on_batch(route, message)
        else:
            self._on_ping(route, message)

    def on_rejected(self, error: WireError) -> None:
        log_rejection(self._counts, error, "learner transitions")

    def after_poll(self) -> None:
        self._flush_acks()

    def _heard(self, actor_id: str, route: bytes) -> None:
        self._routes.setdefault(actor_id, route)  # pings move it: a fenced process's batch must not
        with self._actors_lock:
            live = self._actors.get(actor_id)
            if live is None:
                live = self._actors[actor_id] = Liveness(self._heartbeat_s, self._peer_timeout_s, self._clock)
                if PEER_LOG.allow("learner transitions: connected"):
                    log.info("learner transitions: actor %s connected", actor_id)
            live.heard()

    def _refuse_identity(self, claimed: str, peer_id: str) -> None:
        """A message whose sender is not the actor its CURVE key speaks for: counted, not used."""
        self._counts.add("refused_identity")
        if PEER_LOG.allow("learner transitions: refused identity"):
            n = self._counts.snapshot()["refused_identity"]
            log.warning("learner transitions: key of %s claimed actor %s; refused (#%d)", peer_id, claimed, n)

    def _fence(self, route: bytes, actor_id: str, stream: str | None) -> None:
        """Refuse a superseded process of ``actor_id`` and tell it (it stops sending)."""
        self._fenced_routes[route] = actor_id
        self._fenced_routes.move_to_end(route)
        while len(self._fenced_routes) > _MAX_FENCED_ROUTES:
            self._fenced_routes.popitem(last=False)
        self._counts.add("fenced")
        if PEER_LOG.allow("learner transitions: fenced"):
            n = self._counts.snapshot()["fenced"]
            log.warning(
                "learner transitions: an older process of actor %s (stream %s) fenced by epoch %s (#%d)",
                actor_id,
                stream,
                self.ledger.epoch(actor_id),
                n,
            )
        if stream is not None:
            epoch = self.ledger.epoch(actor_id) or ""
            self._link.send(route, encode(p.control(p.FENCED, "learner", stream=stream, epoch=epoch)))

    def _admit(self, actor_id: str, route: bytes) -> bool:
        """Track the sender of a valid batch; False when ``max_actors`` are tracked and all alive."""
        with self._actors_lock:
            live = self._actors
            if actor_id not in live and len(live) >= self._max_actors:
                silent = next((a for a, peer in live.items() if not peer.alive()), None)
                if silent is None:
                    self._counts.add("refused_actors")  # not acked: it resends once there is room
                    if PEER_LOG.allow("learner transitions: refused actor"):
                        log.warning("learner transitions: %d actors tracked; refused %s", len(live), actor_id)
                    return False
                del live[silent]
                self._routes.pop(silent, None)
        self._heard(actor_id, route)
        return True

    def _check_ahead(self, actor_id: str, stream: str, seq: int) -> None:
        """Refuse a batch number (or a ping's count) implausibly far past the stream's newest batch."""
        newest = self.ledger.numbered_upto(actor_id, stream)
        limit = newest + self._max_seq_ahead if newest else _FIRST_SEQ_CEILING
        if seq > limit:
            raise WireError("schema", f"sequence number {seq} is far past the stream's {newest}")

    def _on_ping(self, route: bytes, message: Message) -> None:
        stream = p.meta_str(message, "stream")
        upto = p.meta_int(message, "next")
        dropped = p.meta_int(message, "dropped") if "dropped" in message.meta else 0
        if dropped > upto:
            raise WireError("schema", f"ping: dropped {dropped} of only {upto} batches")
        if not self.ledger.claim_epoch(message.sender, stream):
            self._fence(route, message.sender, stream)
            return
        self._fenced_routes.pop(route, None)
        if message.sender in self._actors:  # a ping alone creates no state: a valid batch does
            self._check_ahead(message.sender, stream, upto)
            self._routes[message.sender] = route  # the process holding the epoch: acks go here
            self.ledger.numbered(message.sender, stream, upto, dropped)
            self._heard(message.sender, route)
        self._link.send(route, encode(p.control(p.PONG, "learner", session=self.session)))

    def _on_batch(self, route: bytes, message: Message) -> None:
        stream = p.meta_str(message, "stream")
        if self._fenced_routes.get(route) == message.sender:
            self._fence(route, message.sender, None)  # told at its ping already; once is enough
            return
        batch = message_to_transition_batch(message)
        self._check_ahead(message.sender, stream, message.seq)
        if not self._admit(message.sender, route):
            return
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

    def _flush_acks(self) -> None:
        if not self._to_ack:
            return
        groups: dict[tuple[str, str], list[int]] = {}
        while self._to_ack:
            item = self._to_ack.popleft()
            groups.setdefault((item.actor_id, item.stream), []).append(item.seq)
        for (actor_id, stream), seqs in groups.items():
            route = self._routes.get(actor_id)
            if route is None:
                continue  # forgotten while silent: it resends, and is acked then
            ack = p.control(p.ACK, "learner", stream=stream, ranges=p.to_ranges(seqs))
            self._link.send(route, encode(ack))  # gone or full: it pings again
