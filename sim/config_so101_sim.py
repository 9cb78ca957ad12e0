"""lerobot config of the simulated SO-101 (``--robot.type=robotrl_so101_sim``).

Kept apart from the robot class, as lerobot's plugin convention wants: lerobot finds
:class:`~robotrl.sim.so101_sim.SO101Sim` from this module's name. lerobot's CLI tools
load it with ``--robot.discover_packages_path=robotrl.sim.config_so101_sim``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lerobot.robots.config import RobotConfig

from robotrl.config.scene import SceneConfig


@RobotConfig.register_subclass("robotrl_so101_sim")
@dataclass(kw_only=True)
class SO101SimConfig(RobotConfig):  # type: ignore[misc]  # lerobot is untyped
    task: str = "robotrl/SO101PickPlace-v0"
    """Gymnasium id of the sim task the arm stands in."""
    sim_cameras: list[str] = field(default_factory=lambda: ["front", "wrist"])
    """Sim cameras to observe ('front', 'wrist'); lerobot reserves `cameras` for real camera configs."""
    image_size: int = 96
    """Square camera resolution in pixels."""
    control_hz: float = 30.0
    """Physics advances one control tick (1 / control_hz s) per send_action."""
    seed: int = 0
    """Seed of the scene reset on connect."""
    domain_randomization: bool = True
    """Seeded randomisation of the scene on each reset."""
    scene: SceneConfig = field(default_factory=SceneConfig)
    """The physical condition (cube placement, mass, friction), as robotrl's ``env.scene``."""
