"""The ``launch`` group: `robotrl launch`'s learner and actors on one host."""

from __future__ import annotations

from dataclasses import dataclass, field

from robotrl.config.bounds import bounds


@dataclass
class LaunchConfig:
    actors: int = field(default=2, metadata=bounds(ge=0))
    """Actor processes `robotrl launch` starts beside the learner (actor ids actor-0, actor-1, ...);
    at least one without the learner."""
    learner: bool = True
    """Start the learner too (false: the actors join a learner that runs elsewhere)."""
    learner_ranks: int = field(default=1, metadata=bounds(ge=1))
    """Ranks of the learner: above 1, torchrun starts them on this host (data-parallel; rank 0
    owns the links; docs/architecture.md). One per GPU on a CUDA host."""
    max_restarts: int = field(default=3, metadata=bounds(ge=0))
    """Restarts of one crashed role before launch stops everything and fails."""
    restart_backoff_s: float = field(default=1.0, metadata=bounds(ge=0))
    """Wait before the first restart of a role; doubles with every further restart."""
    shutdown_timeout_s: float = field(default=60.0, metadata=bounds(gt=0))
    """Time each stage of shutdown (actors, then the learner) gets before it is killed."""
    status_every_s: float = field(default=2.0, metadata=bounds(gt=0))
    """Refresh period of the health table (and of run_dir/launch_status.json)."""
    actor_seed_stride: int = field(default=100_000, metadata=bounds(gt=0))
    """Actor i starts at seed actor.seed + i * stride, so actors see different episodes."""
    actor_threads: int = field(default=1, metadata=bounds(ge=0, note="0: library default"))
    """Torch/OpenMP threads per actor process (0: library default). One avoids oversubscribing
    the cores the learner needs; spinning OpenMP threads slow everything on a small CPU."""
    learner_threads: int = field(default=0, metadata=bounds(ge=0, note="0: library default"))
    """Torch/OpenMP threads of each learner rank's process (0: library default)."""
