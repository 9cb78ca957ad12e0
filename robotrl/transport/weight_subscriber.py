"""The weight channel's actor side: reassembled, verified, then handed out; latest wins.

The subscriber's background thread (a DEALER; the protocol is in :mod:`.weights`)
says every heartbeat which version it has, reassembles the pieces the publisher
streams and hands out an update only when it is complete, its tensors match the
expected names, shapes and dtypes, every float is finite and the BLAKE3 digest
matches; anything else is refused with a logged, counted reason and the old weights
stay. Versions count within the publisher's session (:mod:`robotrl.core.sessions`): a
restarted publisher's are followed from its first heartbeat, a replaced session's never
taken again. With the policy's layout (as the actor builds it) an update may declare no more
pieces than the layout has tensors nor carry more than 8 bytes per element of the policy,
and no bigger message is read; without a layout, 1 GiB and 1024 pieces.
:meth:`WeightSubscriber.latest` never blocks: the inference worker polls it
between two inferences. On the publisher's own host an update may instead arrive as one
shared-memory segment (:mod:`.weight_segments`), mapped and checked the same way but for the
digest (no wire, no copy); every want then lists the segments still in use, so that none is
rewritten under the weights. A segment that cannot be opened here is asked for again over
the socket; after three in a row, every version is.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy.typing as npt

from robotrl.config.transport import TransportConfig
from robotrl.core.log_limit import EveryFewSeconds
from robotrl.core.sessions import SessionVersions
from robotrl.core.types import WeightsHasher, WeightUpdate
from robotrl.transport import protocol as p
from robotrl.transport.background import PEER_LOG, Counters
from robotrl.transport.heartbeat import Liveness
from robotrl.transport.link import POLL_MS, Clock, LinkClient, client_options
from robotrl.transport.weight_checks import (
    REFUSALS,
    Layout,
    WeightRefused,
    check_complete,
    check_tensor,
    layout_ceiling,
)
from robotrl.transport.weight_segments import MAX_HELD, SegmentLeases, host_id, read_segment
from robotrl.wire.auth import ClientKeys
from robotrl.wire.codec import DEFAULT_LIMITS, Message, WireError, WireLimits, encode

log = logging.getLogger(__name__)

_PIECES_WITHOUT_LAYOUT = 1024
"""Most pieces an update may declare when the subscriber does not know the policy's layout."""
_MAP_FAILURES = 3
"""Segments in a row that could not be mapped before a subscriber stops asking for them."""
_TENSORS_WITHOUT_LAYOUT = 4096
"""Most tensors a shared-memory update may announce when the subscriber does not know the layout."""


@dataclass
class _Assembly:
    """An update being received: pieces checked and hashed as they arrive."""

    version: int
    subset: str
    created_time: float
    count: int
    tensors: dict[str, npt.NDArray[Any]] = field(default_factory=dict)
    nbytes: int = 0
    hasher: WeightsHasher = field(default_factory=lambda: WeightsHasher(threads=1))
    next_index: int = 0


def _subset_and_created(message: Message) -> tuple[str, float]:
    """The first piece's or a segment's ``subset`` and ``created_time``."""
    subset = message.meta.get("subset")
    if subset not in ("full", "trainable"):
        raise WireError("schema", f"weights subset {subset!r} is not 'full' or 'trainable'")
    return str(subset), p.meta_number(message, "created_time")


class WeightSubscriber:
    """Actor side: connects to the publisher; :meth:`latest` returns verified updates only."""

    def __init__(
        self,
        endpoint: str,
        *,
        expected: Layout | None = None,
        have_policy_version: int = -1,
        heartbeat_s: float = 1.0,
        peer_timeout_s: float = 5.0,
        keys: ClientKeys | None = None,
        clock: Clock = time.monotonic,
        shared_memory: bool = True,
    ) -> None:
        self.endpoint = endpoint
        self._shared_memory = shared_memory
        self._host = host_id() if shared_memory else None  # said in every want; None: pieces only
        self._map_failures = 0  # segments in a row this subscriber could not map
        self._seen = -1  # the newest segment announcement (its number) dealt with in this session
        self._expected = expected
        # The actor's own weights belong to no publisher: the first session followed replaces them.
        self._sessions = SessionVersions(version=have_policy_version)
        self._max_pieces = _PIECES_WITHOUT_LAYOUT if expected is None else max(1, len(expected))
        self._max_tensors = _TENSORS_WITHOUT_LAYOUT if expected is None else max(1, len(expected))
        limits = DEFAULT_LIMITS if expected is None else WireLimits(max_total_bytes=layout_ceiling(expected))
        self._max_bytes = limits.max_total_bytes
        self._live = Liveness(heartbeat_s, peer_timeout_s, clock)
        self._link = LinkClient(
            endpoint,
            keys,
            self,
            self._live,
            who="weights",
            peer="publisher",
            thread_name="weights-sub",
            limits=limits,
        )
        self._assembly: _Assembly | None = None
        self._skip_version = -1  # a version refused at a piece: its other pieces and seal are ignored
        self._restart = False
        self._lock = threading.Lock()
        self._ready_update: WeightUpdate | None = None
        self._arrived = threading.Condition(self._lock)
        self._counts = Counters(
            "pieces",
            "segments",
            "verified",
            "superseded",
            "stale",
            "reconnects",
            "refused_old_session",
            *(f"refused_{r}" for r in REFUSALS),
        )
        self._old_session_log = EveryFewSeconds(log, logging.WARNING, clock=clock)
        self._let_go = threading.Event()  # a segment's last view was dropped: tell the publisher now
        self._leases = SegmentLeases(self._let_go.set)
        self._link.start()

    @classmethod
    def from_config(cls, cfg: TransportConfig, actor_id: str, **overrides: Any) -> WeightSubscriber:
        """The subscriber of actor ``actor_id`` (with CURVE it presents that actor's key)."""
        kwargs = {**client_options(cfg, actor_id), "shared_memory": cfg.weights_shared_memory}
        kwargs.update(overrides)
        return cls(cfg.weights_endpoint, **kwargs)

    def latest(self) -> WeightUpdate | None:
        """The newest verified update not yet taken, or None; never blocks."""
        with self._lock:
            update, self._ready_update = self._ready_update, None
            return update

    def recv(self, timeout_s: float) -> WeightUpdate | None:
        """:class:`~robotrl.core.protocols.Receiver` form: wait up to ``timeout_s`` for an update."""
        with self._arrived:
            self._arrived.wait_for(lambda: self._ready_update is not None, timeout=max(0.0, timeout_s))
            update, self._ready_update = self._ready_update, None
            return update

    def publisher_alive(self) -> bool:
        return self._live.alive()

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = self._counts.snapshot()
        out["policy_version"] = self._sessions.version
        out["publisher_session"] = self._sessions.session
        out["publisher_alive"] = self._live.alive()
        return out

    def close(self) -> None:
        self._link.close()
        self._leases.close()

    # -- I/O thread: the link's ClientHandler ----------------------------------------------

    def on_start(self) -> None:
        """Nothing carried over from an earlier run: the publisher resends its newest version."""

    def before_poll(self) -> None:
        """Nothing handed off by the caller: updates only arrive."""

    def wait_ms(self) -> int:
        return POLL_MS

    def beat(self) -> None:
        place = {} if self._host is None else {"host": self._host}
        held = self._leases.holding()  # reported even after falling back to pieces: still in use
        want = p.control(
            p.WANT,
            "actor",
            have=self._sessions.version,
            restart=self._restart,
            holding=held[:MAX_HELD],
            held_more=len(held) > MAX_HELD,
            seen=self._seen,
            session=self._sessions.session,
            **place,
        )
        if self._link.send(encode(want)):  # else not connected: the missing reply tells us so
            self._restart = False

    def on_message(self, message: Message) -> None:
        self._live.heard()  # anything from the publisher is a sign of life
        try:
            if message.kind == p.WBEAT:
                p.meta_int(message, "latest", lo=-1)
                self._on_beat(p.meta_str(message, "session"))
            elif message.kind == p.WPIECE:
                self._on_piece(message)
            elif message.kind == p.WSEAL:
                self._on_seal(message)
            elif message.kind == p.WSHM:
                self._on_segment(message)
            else:
                raise WireError("schema", f"unexpected kind {message.kind!r} from the publisher")
        except WeightRefused as exc:
            if exc.reason != "partial" and message.kind == p.WPIECE:  # ignore the rest of this version
                self._skip_version = message.seq
            self._refuse(exc.reason, str(exc))

    def on_rejected(self, error: WireError) -> None:
        self._live.heard()
        self._refuse("malformed", str(error))

    def on_reconnect(self) -> None:
        self._assembly = None
        self._counts.add("reconnects")

    def after_poll(self) -> None:
        if self._restart or self._let_go.is_set():
            self._let_go.clear()
            self.beat()

    def _on_beat(self, session: str) -> None:
        if not self._follow(session):
            self._old_session_log.event(
                "weights: heartbeat of replaced publisher session %s ignored", session
            )

    def _follow(self, session: str) -> bool:
        """Whether messages of ``session`` may be taken: a replaced session's never, a new
        session's from now on (its versions start over: nothing of it is held yet)."""
        if self._sessions.replaced(session):
            return False
        previous = self._sessions.follow(session)
        if previous is not None:
            self._assembly, self._skip_version, self._seen = None, -1, -1
            if previous[0]:
                log.warning(
                    "weights: publisher session changed (%s at version %d -> %s); following its versions",
                    *previous,
                    session,
                )
        return True

    def _from_replaced_session(self, message: Message) -> bool:
        """A piece or seal of a replaced session: counted and (rate-limited) logged, never taken."""
        session = p.meta_str(message, "session")
        if self._follow(session):
            return False
        self._counts.add("refused_old_session")
        self._old_session_log.event(
            "weights: version %d of replaced publisher session %s refused", message.seq, session
        )
        return True

    def _on_piece(self, message: Message) -> None:
        self._counts.add("pieces")
        version = message.seq
        if self._from_replaced_session(message) or version == self._skip_version:
            return
        index, count = p.meta_int(message, "index"), p.meta_int(message, "count", lo=1)
        if version <= self._sessions.version:
            self._counts.add("stale")
            return
        asm = self._assembly
        if index == 0:
            if asm is not None:
                self._counts.add("superseded" if version > asm.version else "refused_partial")
            subset, created = _subset_and_created(message)
            if count > self._max_pieces:
                raise WeightRefused(
                    "oversized", f"version {version}: {count} pieces (at most {self._max_pieces})"
                )
            asm = self._assembly = _Assembly(version, subset, created, count)
        elif asm is None or asm.version != version or asm.next_index != index or asm.count != count:
            self._lost_track(f"version {version}: piece {index} arrived out of order")
        self._assembly = None  # until this piece passes, the assembly is void
        asm.nbytes += sum(arr.nbytes for arr in message.arrays.values())
        if asm.nbytes > self._max_bytes:
            raise WeightRefused("oversized", f"version {version}: more than {self._max_bytes} bytes")
        for name, arr in message.arrays.items():
            if name in asm.tensors:
                raise WeightRefused("names", f"version {version}: tensor {name!r} sent twice")
            check_tensor(name, arr, self._expected)
            try:
                asm.hasher.update(name, arr)
            except ValueError as exc:
                raise WeightRefused("partial", f"version {version}: {exc}") from exc
            asm.tensors[name] = arr
        asm.next_index += 1
        self._assembly = asm

    def _on_seal(self, message: Message) -> None:
        version = message.seq
        if self._from_replaced_session(message):
            return
        if version == self._skip_version:  # refused (and counted) at a piece; a resend is checked anew
            self._skip_version = -1
            return
        asm = self._assembly
        if version <= self._sessions.version:
            self._counts.add("stale")
            return
        if asm is None or asm.version != version or asm.next_index != asm.count:
            self._lost_track(f"version {version}: sealed before all its pieces arrived")
        self._assembly = None
        if p.meta_int(message, "count", lo=1) != asm.count:
            raise WeightRefused("partial", f"version {version}: seal counts a different number of pieces")
        check_complete(asm.tensors.keys(), asm.subset, self._expected)
        digest = p.meta_str(message, "digest")
        if asm.hasher.hexdigest() != digest:
            raise WeightRefused("digest", f"version {version}: tensors do not match the digest")
        self._hand_out(asm.version, asm.tensors, digest, asm.subset, asm.created_time)
        if self._shared_memory and self._host is None and self._map_failures < _MAP_FAILURES:
            self._host = host_id()  # a segment that could not be mapped: try the next one again

    def _on_segment(self, message: Message) -> None:
        self._counts.add("segments")
        version, offer = message.seq, p.meta_int(message, "offer", lo=1)
        if self._from_replaced_session(message):
            return
        try:
            if version <= self._sessions.version:
                self._counts.add("stale")
                return
            subset, created = _subset_and_created(message)
            path = message.meta.get("segment")
            mapped = self._leases.mapping(path, self._max_bytes + 64 * (self._max_tensors + 1))
            wait_s = 5.0 + len(mapped) / 50e6  # the publisher copies far faster than 50 MB/s
            tensors = read_segment(
                mapped, message.meta.get("tensors"), self._expected, self._max_tensors, wait_s=wait_s
            )
            check_complete(tensors.keys(), subset, self._expected)
        except OSError as exc:
            self._cannot_map(exc)
            return
        finally:  # taken, stale or refused: the publisher may write it again once not held
            self._seen = max(self._seen, offer)
            self._let_go.set()  # say so at once
        self._map_failures = 0
        self._assembly = None  # a version in one piece replaces any half-received one
        self._leases.lend(str(path), tensors)
        self._hand_out(version, tensors, "", subset, created)

    def _cannot_map(self, exc: OSError) -> None:
        """Ask for this version over the socket; after three such segments in a row, for good
        (the two sides do not share /dev/shm: separate containers)."""
        self._map_failures += 1
        self._host, self._restart = None, True
        for_good = self._map_failures >= _MAP_FAILURES
        log.warning(
            "weights: cannot map the publisher's shared memory (%s); %s",
            exc,
            "over the socket from now on" if for_good else "this version over the socket",
        )

    def _hand_out(
        self, version: int, tensors: dict[str, npt.NDArray[Any]], digest: str, subset: str, created: float
    ) -> None:
        """A checked update of the session followed becomes the newest one ready to take."""
        update = WeightUpdate(version, tensors, digest, subset, created, self._sessions.session)
        self._sessions.take(update.session, update.policy_version)
        self._counts.add("verified")
        with self._arrived:
            if self._ready_update is not None:
                self._counts.add("superseded")  # never taken: the newer one wins
            self._ready_update = update
            self._arrived.notify_all()

    def _lost_track(self, detail: str) -> NoReturn:
        self._assembly = None
        self._restart = True  # ask for the whole version again
        raise WeightRefused("partial", detail)

    def _refuse(self, reason: str, detail: str) -> None:
        self._counts.add(f"refused_{reason}")
        if PEER_LOG.allow(f"weights: refused {reason}"):
            log.warning("weights: refused update (%s); keeping the old weights", detail)
