"""The transition stream's learner side: validated, deduplicated, acknowledged once stored.

:class:`TransitionReceiver`: a background thread receives,
validates (the codec, then the batch schema), drops duplicates by sequence
number, answers heartbeats and queues batches for ``recv``. A batch is
acknowledged when the application asks for the next one (or calls
:meth:`TransitionReceiver.commit`), so a learner killed while holding a batch
gets it again after its restart. Its :class:`~robotrl.transport.ledger.SeqLedger`
accounts for every sequence number of every stream (received, duplicate, missing)
and can be checkpointed and restored. The actor's side is :mod:`.transitions`.
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
from robotrl.transport.background import Counters, log_rejection
from robotrl.transport.heartbeat import Liveness
from robotrl.transport.ledger import SeqLedger
from robotrl.transport.link import POLL_MS, Clock, LinkServer, server_options
from robotrl.wire.auth import ServerKeys
from robotrl.wire.codec import REASONS, Message, WireError, encode
from robotrl.wire.messages import TRANSITIONS, message_to_transition_batch

log = logging.getLogger(__name__)


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
        self._link = LinkServer(
            endpoint, keys, self, what="transition receiver", thread_name="transitions-rx"
        )
        self._link.start()
        self.endpoint = self._link.endpoint

    @classmethod
    def from_config(cls, cfg: TransportConfig, **overrides: Any) -> TransitionReceiver:
        kwargs = server_options(cfg)
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

    def close(self) -> None:
        self._link.close()

    # -- I/O thread: the link's ServerHandler ----------------------------------------------

    def wait_ms(self) -> int:
        return 0 if self._to_ack else POLL_MS

    def on_message(self, route: bytes, message: Message) -> None:
        if message.kind == TRANSITIONS:
            self._on_batch(route, message)
        elif message.kind == p.PING:
            self._on_ping(route, message)
        else:
            raise WireError("schema", f"unexpected kind {message.kind!r} from an actor")

    def on_rejected(self, error: WireError) -> None:
        log_rejection(self._counts, error, "learner transitions")

    def after_poll(self) -> None:
        self._flush_acks()

    def _heard(self, actor_id: str, route: bytes) -> None:
        self._routes[actor_id] = route
        with self._actors_lock:
            live = self._actors.get(actor_id)
            if live is None:
                live = self._actors[actor_id] = Liveness(self._heartbeat_s, self._peer_timeout_s, self._clock)
                log.info("learner transitions: actor %s connected", actor_id)
            live.heard()

    def _on_ping(self, route: bytes, message: Message) -> None:
        stream = p.meta_str(message, "stream")
        dropped = message.meta.get("dropped", 0)
        self.ledger.numbered(
            message.sender,
            stream,
            p.meta_int(message, "next"),
            dropped if isinstance(dropped, int) and not isinstance(dropped, bool) and dropped >= 0 else 0,
        )
        self._heard(message.sender, route)
        self._link.send(route, encode(p.control(p.PONG, "learner", session=self.session)))

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

    def _flush_acks(self) -> None:
        if not self._to_ack:
            return
        groups: dict[tuple[str, str], list[int]] = {}
        while self._to_ack:
            item = self._to_ack.popleft()
            groups.setdefault((item.actor_id, item.stream), []).append(item.seq)
        for (actor_id, stream), seqs in groups.items():
            ack = p.control(p.ACK, "learner", stream=stream, ranges=p.to_ranges(seqs))
            self._link.send(self._routes[actor_id], encode(ack))  # gone or full: it pings again
