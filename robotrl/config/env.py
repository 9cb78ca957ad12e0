"""The ``env`` group: which task runs and what the policy observes; ``env.takeover``: when the
sim's scripted expert takes over from the policy; ``env.scene``: the sim's physical condition
(:mod:`robotrl.config.scene`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from robotrl.config.bounds import bounds
from robotrl.config.scene import SceneConfig


@dataclass
class TakeoverConfig:
    """Sim only: the task's scripted expert takes over from the policy, as a person with a leader
    arm would, and the actor records those ticks as interventions (the learner's anchor keeps
    them). Evaluations in `robotrl experiment` always run without it."""

    ticks: int = field(default=0, metadata=bounds(ge=0, note="0: never"))
    """Once an episode has run this many ticks without success, the expert takes over to its
    end. 0: never."""
    on_miss: bool = False
    """Pick-and-place only: the moment the policy's jaws have closed on nothing while the cube is
    on the table, the expert takes over, grasps it again and hands back once it has lifted it
    (once per episode), as a person correcting a missed grasp would."""
    miss_wait_ticks: int = field(default=0, metadata=bounds(ge=0))
    """With ``on_miss``: the jaws must stay shut on nothing this many ticks in a row before the
    expert takes over (0: at once), as a person waits to see whether the robot tries again by
    itself. The state it was stuck in then starts the takeover, so the expert's re-opening is
    learned from states the policy really reaches."""
    before_miss: bool = False
    """Pick-and-place only: as ``on_miss``, but the moment the policy's jaws start to close off
    the cube (more than 1 cm above its centre or 2 cm to one side), before the miss: the expert
    descends onto the cube, grasps it and hands back once it has lifted it."""
    reopen_only: bool = False
    """With ``on_miss`` or ``before_miss``: the expert only pulls the jaws off the bad grasp and
    hands back once they are open above the cube; the policy grasps again by itself (its second
    try, not the expert's, is then in the fine-tuning data)."""
    max_corrections: int = field(default=1, metadata=bounds(ge=1))
    """With ``on_miss`` or ``before_miss``: grasps the expert corrects per episode at most. After
    the last one a policy that misses again stays stuck, and its shut-on-nothing ticks fill the
    buffers the learner imitates."""

    @property
    def enabled(self) -> bool:
        """Whether any trigger (``ticks``, ``on_miss``, ``before_miss``) lets the expert take over."""
        return bool(self.ticks or self.on_miss or self.before_miss)

    @property
    def corrects_grasps(self) -> bool:
        """Whether the expert steps in at a (coming) missed grasp."""
        return self.on_miss or self.before_miss


@dataclass
class EnvConfig:
    id: str = "robotrl/SO101Reach-v0"
    """Gymnasium id of the task (registered under the robotrl/ namespace)."""
    control_hz: float = field(default=30.0, metadata=bounds(gt=0))
    """Control rate: one action per tick."""
    max_episode_ticks: int = field(default=300, metadata=bounds(gt=0))
    """Time limit; the episode is truncated after this many ticks."""
    cameras: list[str] = field(default_factory=lambda: ["front", "wrist"], metadata=bounds(distinct=True))
    """Camera observations to render; empty for state only."""
    image_size: int = field(default=96, metadata=bounds(ge=16, le=1024))
    """Square camera resolution in pixels."""
    privileged_state: bool = False
    """Add the object pose to the state (sim only)."""
    tip_position: bool = False
    """Add the fingertip's position (x, y, z in metres, the arm's forward kinematics) to the
    state, after everything else: a small policy then need not learn the kinematics to place
    the jaws to the centimetre (sim only)."""
    domain_randomization: bool = True
    """Seeded randomisation of object pose, friction, mass, colours, light, cameras."""
    dense_reward: bool = False
    """Add a dense shaping term in [-1, 0] to the sparse success reward."""
    takeover: TakeoverConfig = field(default_factory=TakeoverConfig)
    """When the sim's scripted expert takes over from the policy (off by default)."""
    scene: SceneConfig = field(default_factory=SceneConfig)
    """The sim's physical condition: cube placement, mass and friction (pick-and-place only)."""

    @property
    def pick_place(self) -> bool:
        """Whether the task is the simulated pick-and-place (the one with grasps to miss)."""
        return self.id.endswith("PickPlace-v0")
