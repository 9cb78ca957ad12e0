"""The ``replay`` group: `robotrl replay`'s modes over a recorded dataset."""

from __future__ import annotations

from dataclasses import dataclass, field

from robotrl.config.bounds import bounds

REPLAY_MODES = ("open_loop", "resim", "to_learner", "view")


@dataclass
class ReplayConfig:
    mode: str = field(default="open_loop", metadata=bounds(choices=REPLAY_MODES))
    """open_loop (recorded actions on the sim, states compared), resim (the policy at the recorded
    seeds under actor.latency, outcomes compared), to_learner (episodes into a learner's anchor
    buffer), view (a rerun recording of the episodes)."""
    episodes: list[int] = field(default_factory=list, metadata=bounds(ge=0))
    """Episode indices of the dataset to replay; empty for all."""
    seed: int = 0
    """Reset seed of the dataset's episode 0; episode i used seed + i (as `robotrl record` does).
    Actor recordings (actor.record_dataset) store each episode's seed, which wins."""
    tolerance: float = field(default=1e-4, metadata=bounds(gt=0))
    """open_loop: largest state difference (joint units) still counted as reproduced."""
    output: str | None = None
    """view: the .rrd file to write (default run_dir/replay.rrd)."""
