"""The ``record`` group: `robotrl record`'s scripted-expert demonstrations."""

from __future__ import annotations

from dataclasses import dataclass, field

from robotrl.config.bounds import bounds


@dataclass
class RecordConfig:
    episodes: int = field(default=10, metadata=bounds(gt=0))
    """Episodes to record."""
    output_dir: str = field(default="data/demos", metadata=bounds(nonblank=True))
    """Local directory the LeRobotDataset is written to (must not exist yet, unless overwrite)."""
    repo_id: str = field(
        default="local/so101_demos", metadata=bounds(pattern=r"[^/]+/[^/]+", shape="of the form 'owner/name'")
    )
    """Dataset name stored in its metadata (never pushed to a hub)."""
    expert_noise: float = field(default=0.0, metadata=bounds(ge=0, le=1))
    """Scripted expert: std of the Gaussian noise on its targets, as a share of the action range."""
    dart_noise: float = field(default=0.0, metadata=bounds(ge=0, le=1))
    """DART: std of Gaussian noise added to the executed command only, as a share of the action
    range; the recorded action stays the expert's clean command, so the data shows recoveries."""
    video: bool = False
    """Encode camera frames as MP4 video (smaller, slower) instead of PNG images."""
    overwrite: bool = False
    """Replace an existing output_dir."""
    keep_failures: bool = True
    """Also save episodes in which the task was not solved."""
    miss_rate: float = field(default=0.0, metadata=bounds(ge=0, le=1))
    """Pick-and-place: share of episodes whose first grasp is executed aimed off the cube by
    about ``miss_offset``, while the recorded action stays the clean expert's; the expert then
    grasps again, so the data shows how to recover from a missed grasp."""
    miss_offset: float = field(default=0.015, metadata=bounds(gt=0, le=0.1, note="metres"))
    """Distance (m) a deliberate miss aims off the cube's centre, in a random direction (+-20%)."""
