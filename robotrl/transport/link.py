"""The skeleton every ZeroMQ link shares: a server loop and a client loop on their own threads.

A link has a binding side (:class:`LinkServer`: authenticator, ROUTER, bind, then a
poll loop) and a connecting side (:class:`LinkClient`: DEALER, heartbeats, and a fresh
socket when the peer falls silent). What a link *says* (batches and acks, weight
pieces and wants) lives in its handler, which the loop calls on its I/O thread: the
handler never touches a socket, it only answers callbacks and calls ``send``.
Socket options, CURVE and binding to OS-assigned ports are :mod:`.sockets`'.

Every socket reads a message frame by frame (:func:`receive_bounded`) against its link's
:class:`~robotrl.wire.codec.WireLimits`: a message with more frames or bytes than those
allow is read to its end and dropped frame by frame, never kept whole or decoded, and
no frame larger than the limits allow gets past libzmq (``MAXMSGSIZE``).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import zmq

from robotrl.config.transport import TransportConfig, curve_on
from robotrl.transport.background import lower_priority
from robotrl.transport.heartbeat import Liveness
from robotrl.transport.sockets import (
    bind,
    client_socket,
    message_limit,
    server_socket,
    start_authenticator,
    user_id,
)
from robotrl.wire.auth import ClientKeys, ServerKeys, client_keys, server_keys
from robotrl.wire.codec import DEFAULT_LIMITS, Message, WireError, WireLimits, decode

log = logging.getLogger(__name__)

Clock = Callable[[], float]
POLL_MS = 5
"""The longest a loop waits for a message while it has nothing else to do."""
_ROUTE_BYTES = 256
"""Most bytes of a ROUTER's peer identity (libzmq's limit is 255)."""
_RECV_BURST = 256
"""A server reads at most this many messages per pass, so its own sends are not starved."""


def server_options(cfg: TransportConfig) -> dict[str, Any]:
    """The keyword arguments a link's binding side takes from the transport config."""
    keys = server_keys(cfg.keys_dir) if curve_on(cfg) else None
    return {"heartbeat_s": cfg.heartbeat_s, "peer_timeout_s": cfg.peer_timeout_s, "keys": keys}


def client_options(cfg: TransportConfig, actor_id: str) -> dict[str, Any]:
    """The keyword arguments a link's connecting side takes from the transport config
    (with CURVE, the pair of ``actor_id``)."""
    keys = client_keys(cfg.keys_dir, actor_id) if curve_on(cfg) else None
    return {"heartbeat_s": cfg.heartbeat_s, "peer_timeout_s": cfg.peer_timeout_s, "keys": keys}


def receive_bounded(
    sock: zmq.Socket[bytes], limits: WireLimits, envelope: int = 0
) -> list[zmq.Frame] | WireError:
    """The next whole message's frames, or why it was dropped; raises ``zmq.Again`` when none waits.

    ``envelope`` frames (a ROUTER's peer identity) come before the message. Frames past
    the limits are read and let go one at a time: an oversized message is never gathered
    nor decoded. (libzmq hands a multipart message over once all of it has arrived, so
    before that the bound is its ``MAXMSGSIZE`` per frame, set from the same limits.)
    """
    frames: list[zmq.Frame] = []
    refused: WireError | None = None
    size, read, more = 0, 0, True
    while more:
        # the rest of a message that has begun is already here: libzmq delivers messages whole
        frame = sock.recv(flags=0 if read else zmq.NOBLOCK, copy=False)
        more = bool(sock.getsockopt(zmq.RCVMORE))
        size, read = size + len(frame), read + 1
        if refused is not None:
            continue
        if len(frames) >= limits.max_frames + envelope:
            refused = WireError("frame_count", f"a message of more than {limits.max_frames} frames")
        elif size > message_limit(limits) + _ROUTE_BYTES * envelope:
            refused = WireError("oversized", f"a message of more than {message_limit(limits)} bytes")
        else:
            frames.append(frame)
            continue
        frames.clear()
    return refused if refused is not None else frames


class Waker:
    """Wakes a link's I/O thread from another thread: a byte in a pipe its poll watches.

    Without it, work handed over while the loop waits (a batch to send, an ack to give)
    waited for the next message or the end of the poll (:data:`POLL_MS`): a sender whose
    window was full of batches awaiting acks then stalled for that long. A wake writes only
    while the loop is waiting (or about to): each write hands the GIL to the woken thread,
    which a busy loop, reading messages anyway, does not need."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._lock = threading.Lock()  # a wake never writes to a closed (or reused) descriptor
        self._closed = False
        self._waiting = False

    def fileno(self) -> int:
        return self._read

    def wake(self) -> None:
        """Make the loop's current or next poll return at once (any thread)."""
        if not self._waiting:  # the loop looks for work before it waits again
            return
        with self._lock:
            self._waiting = False
            if self._closed:
                return
            with contextlib.suppress(BlockingIOError):  # full: wakes are pending already
                os.write(self._write, b"\0")

    def wait(self, poller: zmq.Poller, timeout_ms: Callable[[], int]) -> list[tuple[Any, int]]:
        """Poll for up to ``timeout_ms()``, asked only once a wake would reach this poll (the I/O
        thread): work handed over after it looked makes the poll return at once."""
        self._waiting = True
        try:
            return poller.poll(timeout_ms())
        finally:
            self._waiting = False
            self._drain()

    def _drain(self) -> None:
        try:
            while os.read(self._read, 4096):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self._read)
                os.close(self._write)


class _Poll:
    """One socket and its loop's :class:`Waker`, polled together."""

    def __init__(self, sock: zmq.Socket[bytes], waker: Waker) -> None:
        self._sock = sock
        self._waker = waker
        self._poller = zmq.Poller()
        self._poller.register(sock, zmq.POLLIN)
        self._poller.register(waker, zmq.POLLIN)

    def __call__(self, timeout_ms: Callable[[], int]) -> bool:
        """Wait for a message or a wake, up to ``timeout_ms()``; whether a message waits."""
        return any(s is self._sock for s, _ in self._waker.wait(self._poller, timeout_ms))


class Delivery(enum.Enum):
    """What became of a message a server sent to one peer."""

    SENT = "sent"
    FULL = "full"  # the peer's queue is full: try again on a later pass
    GONE = "gone"  # the peer is unreachable (ROUTER_MANDATORY): forget it


class ServerHandler(Protocol):
    """What a link's binding side does on its I/O thread."""

    def wait_ms(self) -> int:
        """How long the next poll may wait: 0 while there is work to send."""
        ...

    def on_message(self, route: bytes, message: Message, peer_id: str | None) -> None:
        """A decoded message from the peer at ``route``, whose key speaks for ``peer_id``
        (None without CURVE); raise WireError to refuse it."""
        ...

    def on_rejected(self, error: WireError) -> None:
        """A message that did not decode, or that :meth:`on_message` refused."""
        ...

    def after_poll(self) -> None:
        """The link's own work between two polls (acks, pieces, dropping silent peers)."""
        ...


class ClientHandler(Protocol):
    """What a link's connecting side does on its I/O thread."""

    def on_start(self) -> None:
        """Once, on the I/O thread, before the first poll."""
        ...

    def before_poll(self) -> None:
        """The caller's hand-offs, taken before each poll."""
        ...

    def wait_ms(self) -> int:
        """How long the next poll may wait: 0 while there is work to send."""
        ...

    def on_message(self, message: Message) -> None:
        """A decoded message from the peer; raise WireError to refuse it."""
        ...

    def on_rejected(self, error: WireError) -> None:
        """A message that did not decode, or that :meth:`on_message` refused."""
        ...

    def beat(self) -> None:
        """Send this link's heartbeat (its peer answers it)."""
        ...

    def on_reconnect(self) -> None:
        """The socket was rebuilt after the peer fell silent: forget what was in flight."""
        ...

    def after_poll(self) -> None:
        """The link's own sending between two polls."""
        ...


class LinkServer:
    """The binding side of a link: a ROUTER served by one background thread.

    Call :meth:`start` once the handler is ready to be called; it returns when the
    socket is bound (or raises RuntimeError naming ``what`` when it cannot be).
    ``mandatory`` makes a send to a vanished peer report :attr:`Delivery.GONE`; ``limits``
    bound every message received (frames, bytes) before it is kept or decoded.
    """

    def __init__(
        self,
        endpoint: str,
        keys: ServerKeys | None,
        handler: ServerHandler,
        *,
        what: str,
        thread_name: str,
        mandatory: bool = False,
        limits: WireLimits = DEFAULT_LIMITS,
    ) -> None:
        self.endpoint = endpoint
        self._limits = limits
        self._keys = keys
        self._handler = handler
        self._what = what
        self._mandatory = mandatory
        self._sock: zmq.Socket[bytes] | None = None
        self._close_linger_ms = 0
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._waker = Waker()
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)

    def start(self) -> None:
        """Bind and start serving; :attr:`endpoint` is then the endpoint bound."""
        requested = self.endpoint
        self._thread.start()
        if not self._ready.wait(10.0) or self._error is not None:
            self._stop.set()
            if self._error is not None:  # the loop never began: nothing will poll the waker
                self._waker.close()
            raise RuntimeError(f"{self._what} could not bind {requested}: {self._error}")

    def send(self, route: bytes, frames: Sequence[Any]) -> Delivery:
        """Send ``frames`` to the peer at ``route`` without waiting (I/O thread only)."""
        assert self._sock is not None
        try:
            self._sock.send_multipart([route, *frames], flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return Delivery.FULL
        except zmq.ZMQError:  # EHOSTUNREACH: that peer is gone
            return Delivery.GONE
        return Delivery.SENT

    def wake(self) -> None:
        """The handler has work to send: end the I/O thread's wait now (any thread)."""
        self._waker.wake()

    def close(self, linger_s: float = 0.0) -> None:
        """Stop the I/O thread; the socket then waits up to ``linger_s`` for messages still queued
        to go out (by default none: closing never waits on a dead peer)."""
        self._close_linger_ms = int(linger_s * 1000)
        self._stop.set()
        self._waker.wake()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0 + linger_s)
        if not self._thread.is_alive():
            self._waker.close()

    def _run(self) -> None:
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        auth = None
        try:
            auth = start_authenticator(ctx, self._keys)
            sock = server_socket(ctx, zmq.ROUTER, self._keys, self._limits)
            if self._mandatory:
                sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
            self.endpoint = bind(sock, self.endpoint)
        except Exception as exc:  # reported to start(), which raises
            if auth is not None:
                auth.stop()
            ctx.destroy(linger=0)  # closes the unbound socket: term() alone would wait for it forever
            self._error = exc
            self._ready.set()
            return
        self._sock = sock
        self._ready.set()
        try:
            poll = _Poll(sock, self._waker)
            while not self._stop.is_set():
                if poll(self._handler.wait_ms):
                    self._receive(sock)
                self._handler.after_poll()
        finally:
            sock.close(linger=self._close_linger_ms)
            if auth is not None:
                auth.stop()
            ctx.term()

    def _receive(self, sock: zmq.Socket[bytes]) -> None:
        for _ in range(_RECV_BURST):
            try:
                frames = receive_bounded(sock, self._limits, envelope=1)
            except zmq.Again:
                return
            try:
                if isinstance(frames, WireError):
                    raise frames
                peer_id = user_id(frames[0]) if self._keys is not None else None
                self._handler.on_message(frames[0].bytes, decode(frames[1:], self._limits), peer_id)
            except WireError as exc:
                self._handler.on_rejected(exc)


class LinkClient:
    """The connecting side of a link: a DEALER, heartbeats, and reconnects, on one thread.

    The client beats every ``live.period_s``; the handler marks the peer heard through
    :attr:`live`. A peer heard once and then silent past ``live.timeout_s`` gets a
    fresh socket (a restarted peer, a dead TCP connection), and the handler is told.
    The thread runs at low priority: it shares the actor's process with its control loop.
    ``limits`` bound every message received, as :class:`LinkServer`'s do.
    """

    def __init__(
        self,
        endpoint: str,
        keys: ClientKeys | None,
        handler: ClientHandler,
        live: Liveness,
        *,
        who: str,
        peer: str,
        thread_name: str,
        limits: WireLimits = DEFAULT_LIMITS,
    ) -> None:
        self.endpoint = endpoint
        self.live = live
        self._limits = limits
        self._keys = keys
        self._handler = handler
        self._who = who
        self._peer = peer
        self._sock: zmq.Socket[bytes] | None = None
        self._stop = threading.Event()
        self._waker = Waker()
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        """The handler has work to send: end the I/O thread's wait now (any thread)."""
        self._waker.wake()

    def send(self, frames: Sequence[Any], *, copy: bool = True) -> bool:
        """Send ``frames`` without waiting (I/O thread only); False while not connected."""
        assert self._sock is not None
        try:
            self._sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=copy)
        except zmq.Again:
            return False
        return True

    def close(self) -> None:
        self._stop.set()
        self._waker.wake()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
        if not self._thread.is_alive():
            self._waker.close()

    def _wait_ms(self) -> int:
        """How long the next poll may wait: the handler's wait, cut short by this link's own
        heartbeat (the first one included: hand-offs taken before the first poll must not keep
        the ping back until the poll ends)."""
        return min(self._handler.wait_ms(), self.live.ms_to_beat())

    def _connect(self, ctx: zmq.Context[zmq.Socket[bytes]]) -> zmq.Socket[bytes]:
        sock = client_socket(ctx, zmq.DEALER, self._keys, self._limits)
        sock.connect(self.endpoint)
        self.live.forget()
        self._sock = sock
        return sock

    def _run(self) -> None:
        lower_priority()
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        sock = self._connect(ctx)
        poll = _Poll(sock, self._waker)
        handler = self._handler
        handler.on_start()
        try:
            while not self._stop.is_set():
                handler.before_poll()
                if poll(self._wait_ms):
                    self._receive(sock)
                if self.live.beat_due():
                    handler.beat()
                if self.live.last_heard is not None and not self.live.alive():
                    log.warning(
                        "%s: %s silent for %.1fs; reconnecting", self._who, self._peer, self.live.timeout_s
                    )
                    sock.close(linger=0)
                    sock = self._connect(ctx)
                    poll = _Poll(sock, self._waker)
                    handler.on_reconnect()
                handler.after_poll()
        finally:
            sock.close(linger=0)
            ctx.term()

    def _receive(self, sock: zmq.Socket[bytes]) -> None:
        while True:
            try:
                frames = receive_bounded(sock, self._limits)
            except zmq.Again:
                return
            try:
                if isinstance(frames, WireError):
                    raise frames
                self._handler.on_message(decode(frames, self._limits))
            except WireError as exc:
                self._handler.on_rejected(exc)
