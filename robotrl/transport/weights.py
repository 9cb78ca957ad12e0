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
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn

import numpy as np
import numpy.typing as npt
import zmq

from robotrl.config.transport import TransportConfig
from robotrl.core.types import WeightsHasher, WeightUpdate, weights_digest
from robotrl.transport import protocol as p
from robotrl.transport.background import Counters, lower_priority
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


class WeightRefused(Exception):  # noqa: N818 (a refusal, not a program error)
    """An update that must not be installed, with a countable reason."""

    def __init__(self, reason: str, detail: str) -> None:
        assert reason in REFUSALS, reason
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def all_finite(arr: npt.NDArray[Any]) -> bool:
    """No NaN or inf in ``arr``. A sum is finite only if every term is (fast path, in the
    array's own precision: float32 sums twice as fast as a float64 one); a sum that
    overflows falls back to the exact element-wise check."""
    if arr.dtype.kind != "f" or arr.size == 0:
        return True
    if np.isfinite(arr.sum(dtype=arr.dtype if arr.dtype.itemsize >= 4 else np.float32)):
        return True
    return bool(np.isfinite(arr).all())


def check_tensor(name: str, arr: npt.NDArray[Any], expected: Layout | None) -> None:
    """Raise :class:`WeightRefused` unless ``arr`` may replace the tensor ``name``."""
    if expected is not None:
        if name not in expected:
            raise WeightRefused("names", f"unexpected tensor {name!r}")
        shape, dtype = expected[name]
        if tuple(arr.shape) != tuple(shape):
            raise WeightRefused("shape", f"{name!r} is {tuple(arr.shape)}, expected {tuple(shape)}")
        if arr.dtype != np.dtype(dtype):
            raise WeightRefused("dtype", f"{name!r} is {arr.dtype}, expected {np.dtype(dtype)}")
    if not all_finite(arr):
        raise WeightRefused("non_finite", f"{name!r} holds NaN or inf")


def check_complete(names: Collection[str], subset: str, expected: Layout | None) -> None:
    """Raise :class:`WeightRefused` unless ``names`` make a whole update of ``subset``."""
    if not names:
        raise WeightRefused("names", "an update without tensors")
    if expected is not None and subset == "full":
        absent = sorted(set(expected) - set(names))
        if absent:
            raise WeightRefused("names", f"a full update lacks {absent[:5]}")


def verify(update: WeightUpdate, expected: Layout | None) -> None:
    """Raise :class:`WeightRefused` unless ``update`` is safe to install over ``expected``."""
    for name, arr in update.tensors.items():
        check_tensor(name, arr, expected)
    check_complete(update.tensors.keys(), update.subset, expected)
    if weights_digest(update.tensors) != update.digest:
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
class _Snapshot:
    """One set of snapshot buffers, reusable once no longer pending or latest and zmq is done."""

    layout: tuple[tuple[str, tuple[int, ...], str], ...]
    arrays: dict[str, npt.NDArray[Any]]
    busy: bool = True
    trackers: list[zmq.MessageTracker] = field(default_factory=list)

    def free(self) -> bool:
        self.trackers = [t for t in self.trackers if not t.done]
        return not self.busy and not self.trackers


class _SnapshotPool:
    """Snapshot buffers kept between publications.

    Copying 200 MB into memory already touched is several times faster than into
    fresh pages, and the snapshot is the largest single cost of a swap on the
    learner's side. Buffers still referenced by queued zero-copy sends are never
    reused (each send is tracked); beyond ``size`` sets, snapshots are allocated.
    """

    def __init__(self, size: int = 3) -> None:
        self._size = size
        self._sets: list[_Snapshot] = []
        self._lock = threading.Lock()

    def take(self, tensors: Mapping[str, npt.NDArray[Any]]) -> _Snapshot:
        layout = tuple((k, tuple(v.shape), v.dtype.str) for k, v in tensors.items())
        with self._lock:
            snap = next((s for s in self._sets if s.layout == layout and s.free()), None)
            if snap is None:
                arrays = {k: np.empty(v.shape, v.dtype) for k, v in tensors.items()}
                snap = _Snapshot(layout, arrays)
                if len(self._sets) < self._size:
                    self._sets.append(snap)
            snap.busy = True
        for k, v in tensors.items():
            np.copyto(snap.arrays[k], v)
        return snap

    def release(self, snap: _Snapshot | None) -> None:
        if snap is not None:
            with self._lock:
                snap.busy = False

    def track(self, snap: _Snapshot | None, tracker: zmq.MessageTracker) -> None:
        if snap is not None:
            with self._lock:
                snap.trackers.append(tracker)


@dataclass
class _Published:
    version: int
    pieces: list[list[Frame]]
    created_time: float
    snapshot: _Snapshot | None
    seal: list[Frame] | None = None  # the digest message, once the hash is done

    def message(self, index: int) -> list[Frame] | None:
        """Piece ``index``, or the seal for index == len(pieces) (None while hashing)."""
        return self.pieces[index] if index < len(self.pieces) else self.seal


@dataclass
class _Sub:
    live: Liveness
    have: int = -1
    cursor: int | None = None  # next piece index of the latest version, while sending
    sent_version: int = -1  # the last version sent in full (not resent unless asked)


class WeightPublisher:
    """Learner side: binds ``endpoint``; ``publish`` makes a new version the one to send.

    Versions start at 1: version 0 is the policy an actor starts with, before any update.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        piece_bytes: int = 16 << 20,
        start_version: int = 1,
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
        self._pending_snapshot: _Snapshot | None = None
        self._pool = _SnapshotPool()
        self._latest: _Published | None = None
        self._subs: dict[bytes, _Sub] = {}
        self._counts = Counters("published", "superseded", "pieces_sent", "rejected")
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
        snap = self._pool.take(tensors) if copy else None
        arrays = snap.arrays if snap is not None else dict(tensors)
        with self._lock:
            if version is not None:
                if version < self._next_version:
                    raise ValueError(f"weight version {version} is not above {self._next_version - 1}")
                self._next_version = version
            version = self._next_version
            self._next_version += 1
            if self._pending is not None:
                self._counts.add("superseded")
                self._pool.release(self._pending_snapshot)
            self._pending = WeightUpdate(version, arrays, "", subset, created)
            self._pending_snapshot = snap
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
                if sending and self._latest is not None and self._latest.seal is None:
                    sending = False  # waiting for the hash: poll briefly instead of spinning
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
            snap, self._pending_snapshot = self._pending_snapshot, None
        if update is None:
            return
        groups = split_pieces(update.tensors, self._piece_bytes)
        pieces = []
        for index, names in enumerate(groups):
            meta = {
                "subset": update.subset,
                "created_time": update.created_time,
                "index": index,
                "count": len(groups),
            }
            arrays = {n: update.tensors[n] for n in names}
            pieces.append(encode(Message(p.WPIECE, "learner", update.version, arrays, meta)))
        published = _Published(update.version, pieces, update.created_time, snap)
        with self._lock:
            if self._latest is not None:
                self._pool.release(self._latest.snapshot)
            self._latest = published
        threading.Thread(target=self._seal, args=(published, update), daemon=True).start()
        self._counts.add("published")
        for sub in self._subs.values():
            sub.cursor = 0 if sub.have < update.version else None

    def _seal(self, published: _Published, update: WeightUpdate) -> None:
        """Hash (BLAKE3 releases the GIL) while the pieces go out; the seal follows them."""
        digest = weights_digest(update.tensors)
        meta = {"digest": digest, "count": len(published.pieces)}
        published.seal = encode(Message(p.WSEAL, "learner", update.version, {}, meta))
        self._wake.set()

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
                frames = latest.message(sub.cursor)
                if frames is None:
                    break  # the seal is not ready
                tracked = [zmq.Frame(f, track=True) for f in frames]
                if not self._send(sock, route, tracked):
                    break  # this subscriber's queue is full
                self._pool.track(latest.snapshot, zmq.MessageTracker(*tracked))
                self._counts.add("pieces_sent")
                sub.cursor += 1
                if sub.cursor > len(latest.pieces):
                    sub.cursor = None
                    sub.sent_version = latest.version

    def _send(self, sock: zmq.Socket[bytes], route: bytes, frames: list[Any]) -> bool:
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
    """An update being received: pieces checked and hashed as they arrive."""

    version: int
    subset: str
    created_time: float
    count: int
    tensors: dict[str, npt.NDArray[Any]] = field(default_factory=dict)
    hasher: WeightsHasher = field(default_factory=lambda: WeightsHasher(threads=1))
    next_index: int = 0


def frames_version(frames: list[Any]) -> int:
    """The version (seq) of a weight message that was refused after decoding."""
    try:
        return decode(frames).seq
    except WireError:
        return -1


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
        self._skip_version = -1  # a version refused for its content: the rest of it is ignored
        self._restart = False
        self._lock = threading.Lock()
        self._ready_update: WeightUpdate | None = None
        self._arrived = threading.Condition(self._lock)
        self._counts = Counters(
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
        lower_priority()
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
                elif message.kind == p.WSEAL:
                    self._on_seal(message)
                else:
                    raise WireError("schema", f"unexpected kind {message.kind!r} from the publisher")
            except WireError as exc:
                self._refuse("malformed", str(exc))
            except WeightRefused as exc:
                if exc.reason != "partial":  # its content is bad: ignore the rest of this version
                    self._skip_version = frames_version(frames)
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
        if version == self._skip_version:
            return
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
            created = p.meta_number(message, "created_time")
            asm = self._assembly = _Assembly(version, str(subset), created, count)
        elif asm is None or asm.version != version or asm.next_index != index or asm.count != count:
            self._lost_track(f"version {version}: piece {index} arrived out of order")
        self._assembly = None  # until this piece passes, the assembly is void
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
        if version == self._skip_version:
            return
        asm = self._assembly
        if version <= self._have:
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
        update = WeightUpdate(asm.version, asm.tensors, digest, asm.subset, asm.created_time)
        self._have = update.version
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
        log.warning("weights: refused update (%s); keeping the old weights", detail)
