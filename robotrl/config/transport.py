"""The ``transport`` group: the ZeroMQ links between actors and the learner."""

from __future__ import annotations

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
    weights_piece_mb: int = field(default=16, metadata=bounds(gt=0))
    """Weight updates travel in pieces of about this many MB (a larger tensor goes alone)."""
    curve: bool = False
    """CURVE authentication and encryption (for links that cross hosts)."""
    keys_dir: str = "keys"
    """Directory of CURVE key pairs written by `robotrl keys generate` (needed with ``curve``)."""
