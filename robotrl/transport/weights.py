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
thread. The subscriber's background thread reassembles the pieces and hands out
an update only when it is complete, its tensors match the expected names, shapes
and dtypes, every float is finite and the BLAKE3 digest matches; anything else is
refused with a logged, counted reason and the old weights stay.
:meth:`WeightSubscriber.latest` never blocks: the inference worker polls it
between two inferences.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import zmq

from robotrl.config.schema import TransportConfig
from robotrl.core.types import WeightUpdate, weights_digest
from robotrl.transport import protocol as p
from robotrl.transport.heartbeat import Liveness
from robotrl.transport.sockets import bind, client_socket, server_socket, start_authenticator
from robotrl.wire.auth import ClientKeys, ServerKeys, client_keys, server_keys
from robotrl.wire.codec import Frame, Message, WireError, decode, encode

log = logging.getLogger(__name__)

Clock = Callable[[], float]
Layout = Mapping[str, tuple[tuple[int, ...], np.dtype[Any]]]
"""Tensor name -> (shape, dtype): what an actor's policy expects to receive."""

#: Why a weight update was refused; counted as ``refused_<reason>``.
REFUSALS: Final = ("partial", "digest", "non_finite", "names", "shape", "dtype", "malformed")
_POLL_MS = 5


class _Counter:
    def __init__(self, *names: str) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(names, 0)

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._values[name] = self._values.get(name, 0) + n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)


class WeightRefused(Exception):  # noqa: N818 (a refusal, not a program error)
    """An update that must not be installed, with a countable reason."""

    def __init__(self, reason: str, detail: str) -> None:
        assert reason in REFUSALS, reason
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def all_finite(arr: npt.NDArray[Any]) -> bool:
    """No NaN or inf in ``arr``. A sum is finite only if every term is (fast path); an
    overflowing sum falls back to the exact element-wise check."""
    if arr.dtype.kind != "f" or arr.size == 0:
        return True
    if np.isfinite(arr.sum(dtype=np.float64)):
        return True
    return bool(np.isfinite(arr).all())


def verify(update: WeightUpdate, expected: Layout | None) -> None:
    """Raise :class:`WeightRefused` unless ``update`` is safe to install over ``expected``."""
    tensors = update.tensors
    if expected is not None:
        unknown = sorted(set(tensors) - set(expected))
        if unknown:
            raise WeightRefused("names", f"version {update.version}: unexpected tensors {unknown[:5]}")
        if update.subset == "full":
            absent = sorted(set(expected) - set(tensors))
            if absent:
                raise WeightRefused("names", f"version {update.version}: full update lacks {absent[:5]}")
        if not tensors:
            raise WeightRefused("names", f"version {update.version}: no tensors")
        for name, arr in tensors.items():
            shape, dtype = expected[name]
            if tuple(arr.shape) != tuple(shape):
                raise WeightRefused("shape", f"{name!r} is {tuple(arr.shape)}, expected {tuple(shape)}")
            if arr.dtype != np.dtype(dtype):
                raise WeightRefused("dtype", f"{name!r} is {arr.dtype}, expected {np.dtype(dtype)}")
    for name, arr in tensors.items():
        if not all_finite(arr):
            raise WeightRefused("non_finite", f"version {update.version}: {name!r} holds NaN or inf")
    if weights_digest(tensors) != update.digest:
        raise WeightRefused("digest", f"version {update.version}: tensors do not match the digest")


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
class _Published:
    version: int
    pieces: list[list[Frame]]
    created_time: float


@dataclass
class _Sub:
    live: Liveness
    have: int = -1
    cursor: int | None = None  # next piece index of the latest version, while sending
    sent_version: int = -1  # the last version sent in full (not resent unless asked)


class WeightPublisher:
    """Learner side: binds ``endpoint``; ``publish`` makes a new version the one to send."""

    def __init__(
        self,
        endpoint: str,
        *,
        piece_bytes: int = 16 << 20,
        start_version: int = 0,
        heartbeat_s: float = 1.0,
        peer_timeout_s: float = 5.0,
        keys: ServerKeys | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.session = secrets.token_hex(8)
        self._piece_bytes = piece_bytes
        self._next_version = start_version
        self._heartbeat_s = heartbeat_s
        self._peer_timeout_s = peer_timeout_s
        self._keys = keys
        self._clock = clock
        self._lock = threading.Lock()
        self._pending: WeightUpdate | None = None
        self._latest: _Published | None = None
        self._subs: dict[bytes, _Sub] = {}
        self._counts = _Counter("published", "superseded", "pieces_sent", "rejected")
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.endpoint = endpoint
        self._thread = threading.Thread(target=self._run, args=(endpoint,), name="weights-pub", daemon=True)
        self._thread.start()
        if not self._ready.wait(10.0) or self._error is not None:
            self._stop.set()
            raise RuntimeError(f"weight publisher could not bind {endpoint}: {self._error}")

    @classmethod
    def from_config(cls, cfg: TransportConfig, **overrides: Any) -> WeightPublisher:
        kwargs: dict[str, Any] = {
            "heartbeat_s": cfg.heartbeat_s,
            "peer_timeout_s": cfg.peer_timeout_s,
            "piece_bytes": cfg.weights_piece_mb << 20,
            "keys": server_keys(cfg.keys_dir) if cfg.curve else None,
        }
        kwargs.update(overrides)
        return cls(cfg.weights_endpoint, **kwargs)

    def publish(
        self,
        tensors: Mapping[str, npt.NDArray[Any]],
        subset: str = "full",
        *,
        copy: bool = True,
        version: int | None = None,
    ) -> int:
        """Make ``tensors`` the newest version and return its number; never waits on the network.

        ``copy=True`` snapshots the tensors first, so the caller may go on changing
        them; pass False only for arrays nobody will modify again. ``version`` numbers
        the update explicitly (a resumed learner continues its own count); it must be
        above every version published so far.
        """
        created = self._clock()
        snapshot = {k: np.array(v, copy=True, order="C") if copy else v for k, v in tensors.items()}
        with self._lock:
            if version is not None:
                if version < self._next_version:
                    raise ValueError(f"weight version {version} is not above {self._next_version - 1}")
                self._next_version = version
            version = self._next_version
            self._next_version += 1
            if self._pending is not None:
                self._counts.add("superseded")
            self._pending = WeightUpdate(version, snapshot, "", subset, created)
        self._wake.set()
        return version

    def send(self, item: WeightUpdate) -> bool:
        """:class:`~robotrl.core.protocols.Sender` form of :meth:`publish`: the update keeps its version.

        False (nothing sent) when the version is not above every one published so far.
        """
        try:
            self.publish(item.tensors, item.subset, version=item.version)
        except ValueError as exc:
            log.warning("weights refused for publishing: %s", exc)
            return False
        return True

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = self._counts.snapshot()
        with self._lock:
            out["latest_version"] = self._latest.version if self._latest else None
            out["subscribers"] = len(self._subs)
        return out

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=5.0)

    # -- I/O thread -----------------------------------------------------------------------

    def _run(self, endpoint: str) -> None:
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        auth = None
        try:
            auth = start_authenticator(ctx, self._keys)
            sock = server_socket(ctx, zmq.ROUTER, self._keys)
            sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
            self.endpoint = bind(sock, endpoint)
        except Exception as exc:  # reported to the constructor, which raises
            self._error = exc
            self._ready.set()
            ctx.term()
            return
        self._ready.set()
        try:
            while not self._stop.is_set():
                sending = any(s.cursor is not None for s in self._subs.values())
                if sock.poll(0 if sending or self._wake.is_set() else _POLL_MS, zmq.POLLIN):
                    self._receive(sock)
                self._take_pending()
                self._send_pieces(sock)
                self._drop_dead()
        finally:
            sock.close(linger=0)
            if auth is not None:
                auth.stop()
            ctx.term()

    def _take_pending(self) -> None:
        self._wake.clear()
        with self._lock:
            update, self._pending = self._pending, None
        if update is None:
            return
        digest = weights_digest(update.tensors)
        pieces = []
        groups = split_pieces(update.tensors, self._piece_bytes)
        for index, names in enumerate(groups):
            meta = {
                "digest": digest,
                "subset": update.subset,
                "created_time": update.created_time,
                "index": index,
                "count": len(groups),
                "session": self.session,
            }
            arrays = {n: update.tensors[n] for n in names}
            pieces.append(encode(Message(p.WPIECE, "learner", update.version, arrays, meta)))
        with self._lock:
            self._latest = _Published(update.version, pieces, update.created_time)
        self._counts.add("published")
        for sub in self._subs.values():
            sub.cursor = 0 if sub.have < update.version else None

    def _receive(self, sock: zmq.Socket[bytes]) -> None:
        for _ in range(256):
            try:
                frames = sock.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            route = frames[0].bytes
            try:
                message = decode(frames[1:])
                if message.kind != p.WANT:
                    raise WireError("schema", f"unexpected kind {message.kind!r} from a subscriber")
                have = p.meta_int(message, "have", lo=-1)
                restart = message.meta.get("restart") is True
            except WireError as exc:
                self._counts.add("rejected")
                log.warning("weights: rejected message from a subscriber: %s", exc)
                continue
            self._on_want(sock, route, have, restart)

    def _on_want(self, sock: zmq.Socket[bytes], route: bytes, have: int, restart: bool) -> None:
        sub = self._subs.get(route)
        if sub is None:
            sub = self._subs[route] = _Sub(Liveness(self._heartbeat_s, self._peer_timeout_s, self._clock))
            log.info("weights: subscriber connected (has version %d)", have)
        sub.live.heard()
        sub.have = have
        latest = self._latest
        if latest is not None and latest.version > have and sub.cursor is None:
            sub.cursor = 0 if restart or sub.sent_version != latest.version else None
        beat = p.control(p.WBEAT, "learner", session=self.session, latest=latest.version if latest else -1)
        self._send(sock, route, encode(beat))

    def _send_pieces(self, sock: zmq.Socket[bytes]) -> None:
        latest = self._latest
        if latest is None:
            return
        for route, sub in list(self._subs.items()):
            while sub.cursor is not None:
                if not self._send(sock, route, latest.pieces[sub.cursor]):
                    break
                self._counts.add("pieces_sent")
                sub.cursor += 1
                if sub.cursor == len(latest.pieces):
                    sub.cursor = None
                    sub.sent_version = latest.version

    def _send(self, sock: zmq.Socket[bytes], route: bytes, frames: list[Frame]) -> bool:
        try:
            sock.send_multipart([route, *frames], flags=zmq.NOBLOCK, copy=False)
            return True
        except zmq.Again:
            return False  # its queue is full; go on next pass
        except zmq.ZMQError:  # EHOSTUNREACH: that subscriber is gone
            self._subs.pop(route, None)
            return False

    def _drop_dead(self) -> None:
        for route, sub in list(self._subs.items()):
            if not sub.live.alive():
                log.info("weights: subscriber silent for %.1fs; forgotten", sub.live.timeout_s)
                del self._subs[route]


@dataclass
class _Assembly:
    version: int
    digest: str
    subset: str
    created_time: float
    count: int
    tensors: dict[str, npt.NDArray[Any]] = field(default_factory=dict)
    next_index: int = 0


class WeightSubscriber:
    """Actor side: connects to the publisher; :meth:`latest` returns verified updates only."""

    def __init__(
        self,
        endpoint: str,
        *,
        expected: Layout | None = None,
        have_version: int = -1,
        heartbeat_s: float = 1.0,
        peer_timeout_s: float = 5.0,
        keys: ClientKeys | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.endpoint = endpoint
        self._expected = expected
        self._have = have_version
        self._keys = keys
        self._clock = clock
        self._live = Liveness(heartbeat_s, peer_timeout_s, clock)
        self._publisher_session: str | None = None
        self._assembly: _Assembly | None = None
        self._restart = False
        self._lock = threading.Lock()
        self._ready_update: WeightUpdate | None = None
        self._arrived = threading.Condition(self._lock)
        self._counts = _Counter(
            "pieces", "verified", "superseded", "stale", "reconnects", *(f"refused_{r}" for r in REFUSALS)
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="weights-sub", daemon=True)
        self._thread.start()

    @classmethod
    def from_config(cls, cfg: TransportConfig, **overrides: Any) -> WeightSubscriber:
        kwargs: dict[str, Any] = {
            "heartbeat_s": cfg.heartbeat_s,
            "peer_timeout_s": cfg.peer_timeout_s,
            "keys": client_keys(cfg.keys_dir) if cfg.curve else None,
        }
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

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = self._counts.snapshot()
        out["have_version"] = self._have
        out["publisher_alive"] = self._live.alive()
        return out

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)

    # -- I/O thread -----------------------------------------------------------------------

    def _run(self) -> None:
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        sock = self._connect(ctx)
        try:
            while not self._stop.is_set():
                if sock.poll(_POLL_MS, zmq.POLLIN):
                    self._receive(sock)
                if self._live.beat_due() or self._restart:
                    self._send_want(sock)
                if self._live.last_heard is not None and not self._live.alive():
                    log.warning("weights: publisher silent for %.1fs; reconnecting", self._live.timeout_s)
                    sock.close(linger=0)
                    sock = self._connect(ctx)
                    self._assembly = None
                    self._counts.add("reconnects")
        finally:
            sock.close(linger=0)
            ctx.term()

    def _connect(self, ctx: zmq.Context[zmq.Socket[bytes]]) -> zmq.Socket[bytes]:
        sock = client_socket(ctx, zmq.DEALER, self._keys)
        sock.connect(self.endpoint)
        self._live.forget()
        return sock

    def _send_want(self, sock: zmq.Socket[bytes]) -> None:
        want = p.control(p.WANT, "actor", have=self._have, restart=self._restart)
        try:
            sock.send_multipart(encode(want), flags=zmq.NOBLOCK)
            self._restart = False
        except zmq.Again:
            pass  # not connected: the missing heartbeat reply tells us so

    def _receive(self, sock: zmq.Socket[bytes]) -> None:
        while True:
            try:
                frames = sock.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            self._live.heard()
            try:
                message = decode(frames)
                if message.kind == p.WBEAT:
                    self._on_beat(p.meta_str(message, "session"), p.meta_int(message, "latest", lo=-1))
                elif message.kind == p.WPIECE:
                    self._on_piece(message)
                else:
                    raise WireError("schema", f"unexpected kind {message.kind!r} from the publisher")
            except WireError as exc:
                self._refuse("malformed", str(exc))
            except WeightRefused as exc:
                self._refuse(exc.reason, str(exc))

    def _on_beat(self, session: str, latest: int) -> None:
        if session != self._publisher_session:
            if self._publisher_session is not None and latest < self._have:
                log.warning(
                    "weights: publisher restarted at version %d below ours (%d); accepting its versions",
                    latest,
                    self._have,
                )
                self._have = -1
            self._publisher_session = session

    def _on_piece(self, message: Message) -> None:
        self._counts.add("pieces")
        version = message.seq
        index, count = p.meta_int(message, "index"), p.meta_int(message, "count", lo=1)
        if version <= self._have:
            self._counts.add("stale")
            return
        asm = self._assembly
        if index == 0:
            if asm is not None:
                self._counts.add("superseded" if version > asm.version else "refused_partial")
            subset = message.meta.get("subset")
            if subset not in ("full", "trainable"):
                raise WireError("schema", f"weights subset {subset!r} is not 'full' or 'trainable'")
            asm = self._assembly = _Assembly(
                version,
                p.meta_str(message, "digest"),
                str(subset),
                p.meta_number(message, "created_time"),
                count,
            )
        elif asm is None or asm.version != version or asm.next_index != index or asm.count != count:
            self._assembly = None
            self._restart = True  # ask for the whole version again
            raise WeightRefused("partial", f"version {version}: piece {index} arrived out of order")
        for name, arr in message.arrays.items():
            if name in asm.tensors:
                self._assembly = None
                raise WeightRefused("names", f"version {version}: tensor {name!r} sent twice")
            asm.tensors[name] = arr
        asm.next_index += 1
        if asm.next_index < asm.count:
            return
        self._assembly = None
        update = WeightUpdate(asm.version, asm.tensors, asm.digest, asm.subset, asm.created_time)
        verify(update, self._expected)
        self._have = update.version
        self._counts.add("verified")
        with self._arrived:
            if self._ready_update is not None:
                self._counts.add("superseded")  # never taken: the newer one wins
            self._ready_update = update
            self._arrived.notify_all()

    def _refuse(self, reason: str, detail: str) -> None:
        self._counts.add(f"refused_{reason}")
        log.warning("weights: refused update (%s); keeping the old weights", detail)
