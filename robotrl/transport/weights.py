"""The weight channel, learner to actors: versioned, latest wins, installed only when verified.

The Clone pattern of the ZeroMQ guide rather than PUB/SUB (which drops silently
at its high-water mark and to late joiners, and whose CONFLATE cannot carry
multipart messages): each subscriber (a DEALER in the actor's inference worker)
says every heartbeat which version it has; the publisher (a ROUTER in the learner)
answers with a heartbeat and, when it holds a newer version, streams that version
to it in pieces of whole tensors. Only the newest version is ever held or sent,
so an actor that was away gets the newest, not a backlog; a newer publication
supersedes one still being sent.

``publish`` returns at once after a snapshot copy of the tensors (so the learner
may keep training in place); digest, splitting and sending run on a background
thread. A subscriber on this host (the same boot id in its ``want``) gets a version as
one announcement of a shared-memory segment instead (:mod:`.weight_segments`), sent as the
snapshot starts being written into it (the subscriber checks each tensor once written);
nothing is hashed unless some subscriber needs pieces. ``publish`` is called from one thread.
The actor's side is :mod:`.weight_subscriber`; the socket loop is :mod:`.link`'s.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy.typing as npt
import zmq

from robotrl.config.transport import TransportConfig
from robotrl.core.types import WeightUpdate, weights_digest
from robotrl.transport import protocol as p
from robotrl.transport.background import PEER_LOG, Counters
from robotrl.transport.heartbeat import Liveness
from robotrl.transport.link import POLL_MS, Clock, Delivery, LinkServer, server_options
from robotrl.transport.snapshots import Snapshot, SnapshotPool
from robotrl.transport.sockets import CONTROL_LIMITS
from robotrl.transport.weight_segments import MAX_HELD, Segment, SegmentPool, host_id
from robotrl.wire.auth import ServerKeys
from robotrl.wire.codec import Frame, Message, WireError, encode

log = logging.getLogger(__name__)


def split_pieces(tensors: Mapping[str, npt.NDArray[Any]], piece_bytes: int) -> list[list[str]]:
    """Tensor names grouped in name order into pieces of about ``piece_bytes``.

    A tensor larger than ``piece_bytes`` travels alone in its own piece.
    """
    pieces: list[list[str]] = []
    size = 0
    for name in sorted(tensors):
        n = int(tensors[name].nbytes)
        if not pieces or (size + n > piece_bytes and pieces[-1]):
            pieces.append([])
            size = 0
        pieces[-1].append(name)
        size += n
    return pieces or [[]]


@dataclass
class _Pending:
    """A version published and not yet taken by the I/O thread."""

    update: WeightUpdate
    snapshot: Snapshot | None
    segment: Segment | None  # being written while ``written`` is unset
    written: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Published:
    policy_version: int
    tensors: Mapping[str, npt.NDArray[Any]]  # what the pieces carry, hashed for the seal
    pieces: list[list[Frame]]
    snapshot: Snapshot | None
    segment: Segment | None
    announcement: dict[str, Any] | None  # the segment's message meta, for subscribers on this host
    written: threading.Event  # the segment is whole: pieces of it may go out
    seal: list[Frame] | None = None  # the digest message, once the hash is done
    sealing: bool = False  # the hash has been started (only once a subscriber needs pieces)

    def message(self, index: int) -> list[Frame] | None:
        """Piece ``index``, or the seal for index == len(pieces) (None while hashing)."""
        return self.pieces[index] if index < len(self.pieces) else self.seal


@dataclass
class _Sub:
    live: Liveness
    have: int = -1
    host: str | None = None  # its boot id when it can map this host's segments
    cursor: int | None = None  # next piece index of the latest version, while sending
    sent_version: int = -1  # the last version sent in full (not resent unless asked)


class WeightPublisher:
    """Learner side: binds ``endpoint``; ``publish`` makes a new version the one to send.

    Versions start at 1: version 0 is the policy an actor starts with, before any update.
    At most ``max_subscribers`` are served at once (a silent one is forgotten after the
    peer timeout); a want from one more is left unanswered, so it asks again.
    ``shared_memory`` False never makes segments: every subscriber gets pieces.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        piece_bytes: int = 16 << 20,
        start_policy_version: int = 1,
        heartbeat_s: float = 1.0,
        peer_timeout_s: float = 5.0,
        keys: ServerKeys | None = None,
        clock: Clock = time.monotonic,
        max_subscribers: int = 64,
        shared_memory: bool = True,
    ) -> None:
        self.session = secrets.token_hex(8)
        self._max_subscribers = max_subscribers
        self._piece_bytes = piece_bytes
        self._next_version = start_policy_version
        self._heartbeat_s = heartbeat_s
        self._peer_timeout_s = peer_timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._pending: _Pending | None = None
        self._pool = SnapshotPool()
        self._host = host_id() if shared_memory else None
        self._segments = SegmentPool() if self._host is not None else None  # under self._lock
        self._local: set[bytes] = set()  # subscribers on this host (under self._lock)
        self._offers = 0  # segment announcements sent, numbered from 1 (under self._lock)
        self._latest: _Published | None = None
        self._subs: dict[bytes, _Sub] = {}
        self._counts = Counters(
            "published", "superseded", "pieces_sent", "segments_sent", "rejected", "refused_subscribers"
        )
        self._wake = threading.Event()
        self._link = LinkServer(
            endpoint,
            keys,
            self,
            what="weight publisher",
            thread_name="weights-pub",
            mandatory=True,
            limits=CONTROL_LIMITS,  # subscribers only ever say which version they have
        )
        self._link.start()
        self.endpoint = self._link.endpoint

    @classmethod
    def from_config(cls, cfg: TransportConfig, **overrides: Any) -> WeightPublisher:
        kwargs: dict[str, Any] = {
            **server_options(cfg),
            "piece_bytes": cfg.weights_piece_mb << 20,
            "max_subscribers": cfg.max_actors,
            "shared_memory": cfg.weights_shared_memory,
        }
        kwargs.update(overrides)
        return cls(cfg.weights_endpoint, **kwargs)

    def publish(
        self,
        tensors: Mapping[str, npt.NDArray[Any]],
        subset: str = "full",
        *,
        copy: bool = True,
        policy_version: int | None = None,
    ) -> int:
        """Make ``tensors`` the newest version and return its number; never waits on the network.

        ``copy=True`` snapshots the tensors first, so the caller may go on changing
        them; pass False only for arrays nobody will modify again. ``policy_version`` numbers
        the update explicitly (a resumed learner continues its own count); it must be
        above every version published so far.
        """
        created = self._clock()
        with self._lock:
            if policy_version is not None:
                if policy_version < self._next_version:
                    raise ValueError(f"policy version {policy_version} is not above {self._next_version - 1}")
                self._next_version = policy_version
            version = self._next_version
            self._next_version += 1
            pool = self._segments if copy and self._local else None
            segment = pool.reuse(version, tensors) if pool is not None else None
        if pool is not None and segment is None:  # none idle: make one without holding the lock
            made = pool.fresh(tensors)
            with self._lock:
                segment = pool.adopt(made, version, tensors) if made is not None else None
        snap = self._pool.take(tensors) if copy and segment is None else None
        arrays = segment.arrays if segment is not None else snap.arrays if snap is not None else dict(tensors)
        pending = _Pending(WeightUpdate(version, arrays, "", subset, created), snap, segment)
        with self._lock:
            if self._pending is not None:
                self._counts.add("superseded")  # never announced
                self._withdraw(self._pending)
            self._pending = pending
        if segment is not None:
            self._nudge()  # subscribers on this host check each tensor while the next is copied
            try:
                segment.fill(tensors)
            except BaseException:  # subscribers mapping it refuse it; nobody else is offered it
                with self._lock:
                    if self._pending is pending:
                        self._pending = None
                        self._withdraw(pending)
                raise
        pending.written.set()
        self._nudge()
        return version

    def send(self, item: WeightUpdate) -> bool:
        """:class:`~robotrl.core.protocols.Sender` form of :meth:`publish`: the update keeps its version.

        False (nothing sent) when the version is not above every one published so far.
        """
        try:
            self.publish(item.tensors, item.subset, policy_version=item.policy_version)
        except ValueError as exc:
            log.warning("weights refused for publishing: %s", exc)
            return False
        return True

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = self._counts.snapshot()
        with self._lock:
            out["policy_version"] = self._latest.policy_version if self._latest else None
            out["subscribers"] = len(self._subs)
            out["local_subscribers"] = len(self._local)
        return out

    def _withdraw(self, offer: _Pending | _Published) -> None:
        """A version superseded (under the lock): its buffers go back for reuse once unread."""
        self._pool.release(offer.snapshot)
        if offer.segment is not None and self._segments is not None:
            self._segments.withdraw(offer.segment)

    def _nudge(self) -> None:
        """Work for the I/O thread (a version to announce, a seal to send): now, not after its poll."""
        self._wake.set()
        self._link.wake()

    def close(self) -> None:
        self._wake.set()
        self._link.close()
        with self._lock:
            if self._segments is not None:
                self._segments.close()  # a subscriber's mapping keeps what it uses

    # -- I/O thread: the link's ServerHandler ----------------------------------------------

    def wait_ms(self) -> int:
        sending = any(s.cursor is not None for s in self._subs.values())
        if sending and self._latest is not None and self._latest.seal is None:
            sending = False  # waiting for the hash: poll briefly instead of spinning
        return 0 if sending or self._wake.is_set() else POLL_MS

    def on_message(self, route: bytes, message: Message, peer_id: str | None) -> None:
        """Weights go to every authorized actor alike, so ``peer_id`` decides nothing here."""
        if message.kind != p.WANT:
            raise WireError("schema", f"unexpected kind {message.kind!r} from a subscriber")
        have = p.meta_int(message, "have", lo=-1)
        host = message.meta.get("host")
        if host is not None:
            host = p.meta_str(message, "host", max_len=64)
        holding = message.meta.get("holding", [])
        if (
            not isinstance(holding, list)
            or len(holding) > MAX_HELD
            or not all(isinstance(h, str) for h in holding)
        ):
            raise WireError("schema", f"want: meta 'holding' must list at most {MAX_HELD} segment names")
        seen = p.meta_int(message, "seen", lo=-1) if "seen" in message.meta else -1
        with self._lock:  # announcements of this session only; a list cut short holds them all
            pool, meta = self._segments, message.meta
            if pool is not None and meta.get("session") == self.session and meta.get("held_more") is not True:
                pool.release(route, seen, holding)
        self._on_want(route, have, message.meta.get("restart") is True, host)

    def on_rejected(self, error: WireError) -> None:
        self._counts.add("rejected")
        if PEER_LOG.allow(f"weights: rejected {error.reason}"):
            log.warning("weights: rejected message from a subscriber: %s", error)

    def after_poll(self) -> None:
        self._take_pending()
        self._send_pieces()
        self._drop_dead()

    def _take_pending(self) -> None:
        self._wake.clear()
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is None:
            return
        update, segment = pending.update, pending.segment
        groups = split_pieces(update.tensors, self._piece_bytes)
        pieces = []
        for index, names in enumerate(groups):
            meta = {
                "subset": update.subset,
                "created_time": update.created_time,
                "index": index,
                "count": len(groups),
                "session": self.session,
            }
            arrays = {n: update.tensors[n] for n in names}
            pieces.append(encode(Message(p.WPIECE, "learner", update.policy_version, arrays, meta)))
        announcement = None
        if segment is not None:
            announcement = {
                "subset": update.subset,
                "created_time": update.created_time,
                "session": self.session,
                **segment.meta(),
            }
        published = _Published(
            update.policy_version,
            update.tensors,
            pieces,
            pending.snapshot,
            segment,
            announcement,
            pending.written,
        )
        with self._lock:
            if self._latest is not None:
                self._withdraw(self._latest)
            self._latest = published
        self._counts.add("published")
        for sub in self._subs.values():
            sub.cursor = 0 if sub.have < update.policy_version else None

    def _start_seal(self, published: _Published) -> None:
        if not published.sealing:
            published.sealing = True
            threading.Thread(target=self._seal, args=(published,), daemon=True).start()

    def _seal(self, published: _Published) -> None:
        """Hash (BLAKE3 releases the GIL) while the pieces go out; the seal follows them."""
        digest = weights_digest(published.tensors)
        meta = {"digest": digest, "count": len(published.pieces), "session": self.session}
        published.seal = encode(Message(p.WSEAL, "learner", published.policy_version, {}, meta))
        self._nudge()

    def _on_want(self, route: bytes, have: int, restart: bool, host: str | None) -> None:
        sub = self._subs.get(route)
        if sub is None:
            if len(self._subs) >= self._max_subscribers:
                self._counts.add("refused_subscribers")  # it asks again every heartbeat
                return
            sub = self._subs[route] = _Sub(Liveness(self._heartbeat_s, self._peer_timeout_s, self._clock))
            if PEER_LOG.allow("weights: subscriber connected"):
                log.info("weights: subscriber connected (has version %d)", have)
        sub.live.heard()
        sub.have, sub.host = have, host
        with self._lock:
            if host is not None and host == self._host:
                self._local.add(route)
            else:
                self._local.discard(route)
        latest = self._latest
        if latest is not None and latest.policy_version > have and sub.cursor is None:
            sub.cursor = 0 if restart or sub.sent_version != latest.policy_version else None
        beat = p.control(
            p.WBEAT, "learner", session=self.session, latest=latest.policy_version if latest else -1
        )
        self._send(route, encode(beat))

    def _send_pieces(self) -> None:
        latest = self._latest
        if latest is None:
            return
        for route, sub in list(self._subs.items()):
            if sub.cursor is None:
                continue
            if latest.segment is not None and latest.announcement is not None and sub.host == self._host:
                # a lessee before it can read, released once it says it dealt with this offer
                with self._lock:
                    self._offers += 1
                    latest.segment.lessees[route] = self._offers
                    meta = {**latest.announcement, "offer": self._offers}
                if self._send(route, encode(Message(p.WSHM, "learner", latest.policy_version, {}, meta))):
                    self._counts.add("segments_sent")
                    sub.cursor, sub.sent_version = None, latest.policy_version
                continue
            if not latest.written.is_set():
                continue  # pieces of a segment being written: after it is whole
            self._start_seal(latest)
            while sub.cursor is not None:
                frames = latest.message(sub.cursor)
                if frames is None:
                    break  # the seal is not ready
                tracked = [zmq.Frame(f, track=True) for f in frames]
                if not self._send(route, tracked):
                    break  # this subscriber's queue is full
                tracker = zmq.MessageTracker(*tracked)
                self._pool.track(latest.snapshot, tracker)
                if latest.segment is not None:
                    with self._lock:
                        latest.segment.trackers.append(tracker)
                self._counts.add("pieces_sent")
                sub.cursor += 1
                if sub.cursor > len(latest.pieces):
                    sub.cursor = None
                    sub.sent_version = latest.policy_version

    def _send(self, route: bytes, frames: list[Any]) -> bool:
        """False when the subscriber's queue is full (go on next pass) or it is gone (forgotten)."""
        delivery = self._link.send(route, frames)
        if delivery is Delivery.GONE:
            self._forget(route)
        return delivery is Delivery.SENT

    def _forget(self, route: bytes) -> None:
        self._subs.pop(route, None)
        with self._lock:
            self._local.discard(route)
            if self._segments is not None:
                self._segments.forget(route)

    def _drop_dead(self) -> None:
        for route, sub in list(self._subs.items()):
            if not sub.live.alive():
                log.info("weights: subscriber silent for %.1fs; forgotten", sub.live.timeout_s)
                self._forget(route)
