"""Chunk policies: the built-in flow-matching policy, the lerobot adapter, pretraining.

Other parts import only :func:`build_policy`, :func:`load_policy` and
:func:`save_policy`; every policy implements
:class:`~robotrl.core.protocols.ChunkPolicy` and is a torch ``nn.Module``.
"""

from robotrl.policy.checkpoint import CheckpointError
from robotrl.policy.factory import build_policy, inference_threads, load_policy, resolve_device, save_policy

__all__ = [
    "CheckpointError",
    "build_policy",
    "inference_threads",
    "load_policy",
    "resolve_device",
    "save_policy",
]
