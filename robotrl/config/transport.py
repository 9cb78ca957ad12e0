"""The ``transport`` group: the ZeroMQ links between actors and the learner."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field

from robotrl.config.bounds import bounds

ENDPOINT = bounds(pattern=r"(tcp|ipc|inproc)://.*", shape="a ZeroMQ endpoint (tcp://host:port, ipc://path)")


@dataclass
class TransportConfig:
    transitions_endpoint: str = field(default="tcp://127.0.0.1:5555", metadata=ENDPOINT)
    """Where the learner receives transitions (ZeroMQ endpoint: tcp://host:port or ipc://path)."""
    weights_endpoint: str = field(default="tcp://127.0.0.1:5556", metadata=ENDPOINT)
    """Where the learner publishes weights (not the transitions' endpoint)."""
    batch_transitions: int = field(default=64, metadata=bounds(gt=0))
    """Transitions per batch on the wire."""
    heartbeat_s: float = field(default=1.0, metadata=bounds(gt=0))
    """Heartbeat period on every link."""
    peer_timeout_s: float = 5.0
    """A peer silent this long is declared dead (longer than ``heartbeat_s``)."""
    max_inflight_batches: int = field(default=256, metadata=bounds(gt=0))
    """Unacknowledged batches held in memory before spooling to disk."""
    spool_dir: str = "runs/spool"
    """Directory of the disk spool used while the learner is away."""
    spool_max_mb: int = field(default=2048, metadata=bounds(ge=0))
    """Disk spool budget; beyond it batches are dropped and counted."""
    write_ahead: bool = True
    """Every batch goes to the spool before it is sent (deleted when acknowledged), so an actor
    killed and restarted with the same id resends what the learner had not acknowledged."""
    fsync: bool = True
    """fsync every spool file and its folder, so a spooled batch survives a power cut, not just a
    killed process; false trades that for the disk's sync latency on every batch."""
    weights_subset: str = field(default="trainable", metadata=bounds(choices=("trainable", "full")))
    """'trainable' (only the trained tensors) or 'full'."""
    send_window: int = field(default=16, metadata=bounds(gt=0))
    """Transition batches sent and not yet acknowledged at once (credit-based flow control)."""
    coalesce_kb: int = field(default=1024, metadata=bounds(ge=0))
    """Batches queued behind one another (a backlog: a burst, a learner away) go out joined, in
    messages of up to this many KiB, each numbered, spooled and acknowledged once; a batch alone
    in the queue goes as it is. 0: one message per batch."""
    weights_piece_mb: int = field(default=16, metadata=bounds(gt=0))
    """Weight updates travel in pieces of about this many MB (a larger tensor goes alone)."""
    weights_shared_memory: bool = True
    """An actor on the learner's own host maps each weight update from shared memory (/dev/shm)
    instead of receiving it over the socket: publish to installed about 30 ms for 200 MB
    instead of 130 here. false: the socket always (a failed map falls back by itself)."""
    max_batch_mb: int = field(default=64, metadata=bounds(gt=0))
    """Largest transition message the learner reads (all its frames); a bigger one is dropped
    frame by frame, unread. 64 MB holds 64 transitions of two 96x96 cameras several times over."""
    max_actors: int = field(default=64, metadata=bounds(gt=0))
    """Actors the learner keeps track of at once; a new one beyond it replaces a silent one or waits."""
    max_seq_ahead: int = field(default=1_000_000, metadata=bounds(gt=0))
    """How far past the newest batch known of a stream a batch number or ping may reach."""
    curve: bool | None = None
    """CURVE authentication and encryption; null: on unless both endpoints are loopback, ipc or
    inproc. false with an endpoint another host can reach is refused."""
    keys_dir: str = "keys"
    """Directory of CURVE key pairs written by `robotrl keys generate` (needed with CURVE on)."""


def is_local_endpoint(endpoint: str) -> bool:
    """Whether only this host can reach ``endpoint``: ipc, inproc, or tcp on an address or
    hostname that resolves to loopback only (``*``, 0.0.0.0, an interface or unresolvable: no)."""
    scheme, _, rest = endpoint.partition("://")
    if scheme in ("ipc", "inproc"):
        return True
    host = rest.rpartition(";")[2].rpartition(":")[0].strip("[]")
    if not host or host == "*":
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        resolved = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        return False
    return bool(resolved) and all(ipaddress.ip_address(str(a).split("%")[0]).is_loopback for a in resolved)


def curve_on(cfg: TransportConfig) -> bool:
    """CURVE as configured, or (``curve`` null) on unless both endpoints stay on this host."""
    if cfg.curve is not None:
        return cfg.curve
    return not all(is_local_endpoint(e) for e in (cfg.transitions_endpoint, cfg.weights_endpoint))
