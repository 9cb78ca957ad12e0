"""Data-parallel learning on torch.distributed: one learner as the ranks torchrun starts.

Rank 0 is the learner of a one-process run: it alone owns the links, the journal, the buffers,
the published versions, snapshots, metrics and checkpoints. Every rank holds the same
networks. Before each update group rank 0 broadcasts a command (:class:`GroupCommands`); for
each update it samples ``batch_size`` per rank, keeps one shard and scatters the others
(:class:`BatchScatter`); DDP averages the gradients (:meth:`Ranks.wrap`), so every rank steps
to bitwise the same weights. The other ranks run :func:`follow`, which obeys the commands.

A one-process learner uses :data:`SINGLE`, whose collectives are the identity: the algorithms
and the loop are the same code serial or parallel.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from safetensors.numpy import load as load_arrays
from safetensors.numpy import save as save_arrays
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from robotrl.core.protocols import Algorithm
from robotrl.learner.guard import UpdateGuard

Batch = dict[str, Any]

WAIT = timedelta(hours=24)
"""How long a rank waits in a collective: rank 0 may wait hours for its actors' first samples
while the others wait for its first command. A rank that dies ends every rank through torchrun."""

_RUN, _STOP = 1.0, 0.0
_LISTS = "lists"
"""Metadata key of a shard's list values (``task``), as JSON: safetensors holds arrays only."""


@dataclasses.dataclass(frozen=True)
class Ranks:
    """This process's place among the learner's ranks, and the collectives the algorithms use."""

    rank: int = 0
    world: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def parallel(self) -> bool:
        return self.world > 1

    def wrap(self, module: nn.Module, *, unused_parameters: bool = False) -> nn.Module:
        """``module`` whose backward averages its gradients over the ranks (DDP); itself alone.
        Buffers are not rebroadcast each forward: no rank changes them apart from the others.
        ``unused_parameters``: the module may hold parameters its configuration leaves out of
        the loss (a policy's camera embedding without cameras, its language table without a
        task); DDP finds them in the first backward and expects the same set ever after
        (``static_graph``: no search of the graph each step, as ``find_unused_parameters`` does)."""
        if not self.parallel:
            return module
        # oneDNN returns a 1x1 convolution's weight gradient with channels-last strides: the
        # same memory as the bucket's view (only size-1 dimensions' strides differ), so DDP's
        # warning about a copy is noise.
        warnings.filterwarnings("ignore", "Grad strides do not match bucket view strides", UserWarning)
        return DistributedDataParallel(module, broadcast_buffers=False, static_graph=unused_parameters)

    def sum(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` summed over the ranks (no gradient flows through it)."""
        if not self.parallel:
            return value
        total = value.detach().clone()
        dist.all_reduce(total)
        return total

    def gather(self, value: torch.Tensor) -> torch.Tensor:
        """Every rank's ``value`` (the same shape on each), concatenated in rank order."""
        if not self.parallel:
            return value
        sent = value.detach().to(torch.uint8) if value.dtype == torch.bool else value.detach()
        parts = [torch.empty_like(sent) for _ in range(self.world)]
        dist.all_gather(parts, sent.contiguous())  # gloo gathers no bool
        gathered = torch.cat(parts)
        return gathered.bool() if value.dtype == torch.bool else gathered

    def mean_metrics(self, metrics: Mapping[str, float]) -> dict[str, float]:
        """Each metric averaged over the ranks: every rank then logs, and guards on, the same
        numbers (a NaN on one rank is a NaN on all)."""
        if not self.parallel:
            return dict(metrics)
        names = sorted(metrics)
        values = torch.tensor([float(metrics[k]) for k in names], dtype=torch.float64)
        dist.all_reduce(values)
        return {k: float(v) / self.world for k, v in zip(names, values.tolist(), strict=True)}


SINGLE = Ranks()
"""A learner of one process."""


def init_ranks(device: torch.device) -> Ranks:
    """Join the process group torchrun describes (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK`` and its
    rendezvous): gloo on the CPU, NCCL on CUDA with each rank's current device its local GPU
    (so ``cuda`` means that GPU). Without torchrun (no ``WORLD_SIZE``, or 1): :data:`SINGLE`."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return SINGLE
    if device.type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=WAIT)
    return Ranks(dist.get_rank(), dist.get_world_size())


def check_same_state(ranks: Ranks, algorithm: Algorithm) -> None:
    """Raise unless every rank holds the state rank 0 holds (networks, optimisers, averages):
    ranks that started apart (another checkpoint, another seed) would train apart."""
    if not ranks.parallel:
        return
    sums = {name: float(t.double().sum()) for name, t in _tensors(algorithm.state_dict())}
    mine = torch.tensor(list(sums.values()), dtype=torch.float64)
    count = torch.tensor([mine.numel()], dtype=torch.int64)
    counts = ranks.gather(count)
    if int(counts.min()) != int(counts.max()):
        raise RuntimeError(f"learner ranks hold states of different sizes: {counts.tolist()} tensors")
    main = mine.clone()
    dist.broadcast(main, 0)
    differ = [name for name, a, b in zip(sums, mine.tolist(), main.tolist(), strict=True) if a != b]
    agree = torch.tensor([0 if differ else 1], dtype=torch.int64)
    if int(ranks.gather(agree).min()) == 0:
        raise RuntimeError(
            f"learner rank {ranks.rank} starts from another state than rank 0"
            + (f" ({', '.join(differ[:5])})" if differ else " (on another rank)")
            + ": every rank must load the same checkpoint and use the same seed"
        )


def _tensors(state: Any, prefix: str = "") -> list[tuple[str, torch.Tensor]]:
    """Every floating tensor in a nested state, in a fixed order (the same on every rank)."""
    if isinstance(state, torch.Tensor):
        return [(prefix, state.detach())] if state.is_floating_point() else []
    if isinstance(state, np.ndarray):
        return [(prefix, torch.from_numpy(state))] if state.dtype.kind == "f" else []
    if isinstance(state, Mapping):
        return [pair for k in state for pair in _tensors(state[k], f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(state, list | tuple):
        return [pair for i, v in enumerate(state) for pair in _tensors(v, f"{prefix}.{i}")]
    return []


class BatchScatter:
    """Rank 0's side of batch sharding: a batch sampled for every rank, split so that rank r
    gets rows r, r + N, r + 2N, ..., and sent as safetensors bytes (no pickle on the wire)."""

    def __init__(self, ranks: Ranks, sample: Callable[[], Batch]) -> None:
        self.ranks, self.sample = ranks, sample

    def __call__(self) -> Batch:
        """Sample, send the other ranks their shards, return rank 0's."""
        batch = self.sample()
        if not self.ranks.parallel:
            return batch
        shards = [_shard(batch, r, self.ranks.world) for r in range(self.ranks.world)]
        payloads = [torch.frombuffer(bytearray(_encode(s)), dtype=torch.uint8) for s in shards]
        sizes = torch.tensor([p.numel() for p in payloads], dtype=torch.int64)
        dist.broadcast(sizes, 0)
        padded = [torch.zeros(int(sizes.max()), dtype=torch.uint8) for _ in payloads]
        for buf, payload in zip(padded, payloads, strict=True):
            buf[: payload.numel()] = payload
        out = torch.empty(int(sizes.max()), dtype=torch.uint8)
        dist.scatter(out, padded, src=0)
        return shards[0]


def receive_shard(ranks: Ranks) -> Batch:
    """A follower's side of :class:`BatchScatter`: its shard of the next batch."""
    sizes = torch.empty(ranks.world, dtype=torch.int64)
    dist.broadcast(sizes, 0)
    out = torch.empty(int(sizes.max()), dtype=torch.uint8)
    dist.scatter(out, None, src=0)
    return _decode(out[: int(sizes[ranks.rank])].numpy().tobytes())


def _shard(batch: Batch, rank: int, world: int) -> Batch:
    """Rows ``rank``, ``rank + world``, ...: each shard draws alike from every buffer the batch mixes."""
    return {
        k: v[rank::world] if isinstance(v, list) else np.ascontiguousarray(v[rank::world])
        for k, v in batch.items()
    }


def _encode(batch: Batch) -> bytes:
    arrays = {k: v for k, v in batch.items() if isinstance(v, np.ndarray)}
    lists = {k: v for k, v in batch.items() if not isinstance(v, np.ndarray)}
    return save_arrays(arrays, metadata={_LISTS: json.dumps(lists)})


def _decode(data: bytes) -> Batch:
    arrays: Batch = dict(load_arrays(data))
    header_len = int.from_bytes(data[:8], "little")  # safetensors: u64 length, then a JSON header
    metadata = json.loads(data[8 : 8 + header_len]).get("__metadata__", {})
    arrays.update(json.loads(metadata.get(_LISTS, "{}")))
    return arrays


class GroupCommands:
    """Rank 0 tells the other ranks, before each update group, to run it (and how far the run
    is through its budget) or to stop; a no-op for one rank."""

    def __init__(self, ranks: Ranks) -> None:
        self.ranks = ranks

    def run_group(self, progress: float | None) -> None:
        self._send(_RUN, -1.0 if progress is None else progress)

    def stop(self) -> None:
        self._send(_STOP, 0.0)

    def _send(self, command: float, progress: float) -> None:
        if self.ranks.parallel:
            dist.broadcast(torch.tensor([command, progress], dtype=torch.float64), 0)


def follow(algorithm: Algorithm, ranks: Ranks, max_nonfinite_groups: int) -> int:
    """A follower rank's whole role: run each group rank 0 commands on the shards it scatters,
    guarded as rank 0 guards (the same metrics and state give the same decisions); the number
    of groups kept, once rank 0 says stop."""
    guard = UpdateGuard(algorithm, max_nonfinite_groups)
    guard.remember()
    kept = 0
    while True:
        message = torch.empty(2, dtype=torch.float64)
        dist.broadcast(message, 0)
        command, progress = message.tolist()
        if command == _STOP:
            return kept
        if progress >= 0:
            algorithm.set_progress(progress)
        result = algorithm.update_group(lambda: receive_shard(ranks))
        if guard.check(kept + 1, result):
            kept += 1
