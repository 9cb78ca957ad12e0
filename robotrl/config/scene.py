"""The ``env.scene`` group: the physical condition the sim runs under (where the cube lies, how
heavy and slippery it is), so demonstrations can be recorded in one condition and a policy
fine-tuned and evaluated in another, as a sim-to-real deployment shift.

Only the pick-and-place task (the one with a cube) reads it; the other tasks ignore it. The
defaults are the ranges the sim always used, so a config that leaves the group alone draws the
same episode from the same seed as before the group existed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from robotrl.config.bounds import bounds


@dataclass
class SceneConfig:
    cube_azimuth: list[float] = field(
        default_factory=lambda: [-0.55, 0.55], metadata=bounds(ge=-1.2, le=1.2, low_high=True)
    )
    """Range [low, high] (rad) the cube's azimuth about the base is drawn from at each reset: 0 is
    straight ahead, positive to the robot's left."""
    cube_radius: list[float] = field(
        default_factory=lambda: [0.17, 0.27], metadata=bounds(ge=0.10, le=0.32, low_high=True)
    )
    """Range [low, high] (m) the cube's distance from the base is drawn from; the arm reaches
    0.10 to 0.32."""
    cube_mass_scale: float = field(default=1.0, metadata=bounds(gt=0))
    """Multiplies the cube's (randomised) mass and inertia."""
    cube_friction_scale: float = field(default=1.0, metadata=bounds(gt=0))
    """Multiplies the cube's (randomised) sliding friction."""
