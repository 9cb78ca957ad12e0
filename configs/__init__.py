"""Hydra config presets, shipped as ``robotrl.configs`` and read with ``pkg://robotrl.configs``.

``config.yaml`` is the root every role composes; the folders are the groups
(``env``, ``policy``, ``actor``, ``learner``, ``transport``), each a set of
presets over the dataclasses of ``robotrl.config`` (one module per group).
"""
