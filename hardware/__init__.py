"""The real world, imported as ``robotrl.hardware``.

Adapters from lerobot robots and teleoperators to robotrl's ``RobotEnv``, the
safety layer every command passes (limits, rate caps, watchdog, emergency stop),
human intervention, latency profiling, and per-robot settings and calibration
notes. Built by the Hardware issue; nothing here yet.
"""
