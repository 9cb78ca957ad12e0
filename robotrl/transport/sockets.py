"""Socket setup shared by both links: options, CURVE, binding to OS-assigned ports.

Every socket gets ``LINGER 0`` (closing never waits on a dead peer), short
reconnect intervals (a restarted peer is found again within about a second) and
``MAXMSGSIZE`` at its link's message budget (:func:`frame_limit`: a peer announcing a
bigger frame is disconnected before libzmq allocates it, rather than refused after).
With keys, the binding side is a CURVE server whose ZAP handler accepts only the
public keys in the authorized directory and names each connection by the actor id its key
speaks for (the message property ``User-Id``); the connecting side is a CURVE client.
A peer without CURVE, or with a key not authorized, never completes the handshake:
its messages are never delivered.
"""

from __future__ import annotations

import re
from typing import Final

import zmq
import zmq.auth.thread
from zmq.utils import z85

from robotrl.wire.auth import ClientKeys, ServerKeys
from robotrl.wire.codec import DEFAULT_LIMITS, WireLimits

CONTROL_LIMITS: Final = WireLimits(max_frames=1, max_total_bytes=0)
"""What a socket that only ever receives control messages (a header, no arrays) accepts."""


def frame_limit(limits: WireLimits) -> int:
    """The largest frame a message within ``limits`` can hold: its header or all its arrays."""
    return max(limits.max_header_bytes, limits.max_total_bytes)


def message_limit(limits: WireLimits) -> int:
    """The most bytes, all frames together, a message within ``limits`` can hold."""
    return limits.max_header_bytes + limits.max_total_bytes


COPY_THRESHOLD: Final = 256 * 1024
"""Frames smaller than this are copied when sent, even with ``copy=False``: pyzmq's zero-copy
send keeps the buffer alive through its garbage-collector thread, which costs more than a copy
below a few hundred kilobytes (a state-only batch of 64 rows: one 67 KB frame)."""


def _common(sock: zmq.Socket[bytes], limits: WireLimits) -> None:
    sock.copy_threshold = COPY_THRESHOLD
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, frame_limit(limits))
    sock.setsockopt(zmq.RECONNECT_IVL, 100)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)


def server_socket(
    ctx: zmq.Context[zmq.Socket[bytes]],
    kind: int,
    keys: ServerKeys | None,
    limits: WireLimits = DEFAULT_LIMITS,
) -> zmq.Socket[bytes]:
    """A binding socket; a CURVE server when ``keys`` is given (start the authenticator first)."""
    sock = ctx.socket(kind)
    _common(sock, limits)
    if keys is not None:
        sock.curve_secretkey = keys.secret
        sock.curve_publickey = keys.public
        sock.curve_server = True
    return sock


def client_socket(
    ctx: zmq.Context[zmq.Socket[bytes]],
    kind: int,
    keys: ClientKeys | None,
    limits: WireLimits = DEFAULT_LIMITS,
) -> zmq.Socket[bytes]:
    """A connecting socket that queues nothing for a peer it is not connected to."""
    sock = ctx.socket(kind)
    _common(sock, limits)
    sock.setsockopt(zmq.IMMEDIATE, 1)
    if keys is not None:
        sock.curve_secretkey = keys.secret
        sock.curve_publickey = keys.public
        sock.curve_serverkey = keys.server_public
    return sock


class _ActorAuthenticator(zmq.auth.thread.ThreadAuthenticator):
    """Admits the authorized keys and gives each connection its key's actor id as User-Id."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], actor_of_key: dict[bytes, str]) -> None:
        super().__init__(ctx)
        self.actor_of_key = actor_of_key

    def curve_user_id(self, client_public_key: bytes) -> str:
        return self.actor_of_key.get(z85.encode(client_public_key), "")


def start_authenticator(
    ctx: zmq.Context[zmq.Socket[bytes]], keys: ServerKeys | None
) -> zmq.auth.thread.ThreadAuthenticator | None:
    """The ZAP handler of ``ctx`` that admits only authorized CURVE clients; None without keys."""
    if keys is None:
        return None
    auth = _ActorAuthenticator(ctx, dict(keys.actor_of_key))
    auth.start()
    auth.configure_curve(domain="*", location=str(keys.authorized_dir))
    return auth


def user_id(frame: zmq.Frame) -> str | None:
    """The actor id the ZAP handler gave the connection ``frame`` came on; None without CURVE."""
    try:
        value = frame.get("User-Id")
    except zmq.ZMQError:  # no ZAP handler on this socket: nothing authenticated
        return None
    return value if isinstance(value, str) and value else None


_PORT_ZERO = re.compile(r"^(tcp://.+):0$")


def bind(sock: zmq.Socket[bytes], endpoint: str) -> str:
    """Bind ``endpoint`` (``tcp://host:0`` picks a free port) and return the endpoint bound."""
    sock.bind(_PORT_ZERO.sub(r"\1:*", endpoint))
    bound = sock.getsockopt(zmq.LAST_ENDPOINT)
    return bound.decode() if isinstance(bound, bytes) else str(bound)


def free_endpoint() -> str:
    """A loopback endpoint nobody listens on (the OS picked its port): for a peer started later
    that must bind a port known in advance, or a test of a peer that must find nobody."""
    ctx = zmq.Context()
    probe = ctx.socket(zmq.ROUTER)
    port = probe.bind_to_random_port("tcp://127.0.0.1")
    probe.close(linger=0)
    ctx.term()
    return f"tcp://127.0.0.1:{port}"
