"""The simulated world, imported as ``robotrl.sim``.

MuJoCo scenes of the SO-101 arm, gymnasium task environments registered under the
``robotrl/`` namespace (reach; pick and place), scripted experts, demonstration
recording into LeRobotDatasets, and the latency models that make virtual-time
experiments exact.
"""

from robotrl.sim.render import configure_gl_backend

configure_gl_backend()  # before anything imports mujoco

from robotrl.sim.registry import ENV_IDS, make_env, register_envs  # noqa: E402

register_envs()

__all__ = ["ENV_IDS", "make_env", "register_envs"]
