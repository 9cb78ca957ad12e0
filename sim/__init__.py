"""The simulated world, imported as ``robotrl.sim``.

MuJoCo scenes of the SO-101 arm, gymnasium task environments registered under the
``robotrl/`` namespace (reach; pick and place), scripted experts, demonstration
recording into LeRobotDatasets, and the latency models that make virtual-time
experiments exact. Built by the Sim issue; nothing here yet.
"""
