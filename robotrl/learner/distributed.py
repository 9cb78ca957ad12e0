"""Data-parallel learning on torch.distributed: one learner as the ranks torchrun starts.

Rank 0 is the learner of a one-process run: it alone owns the links, the journal, the buffers,
the published versions, snapshots, metrics and checkpoints. Every rank starts from rank 0's
state (:func:`share_state`), so every rank holds the same networks. Before each update group
rank 0 broadcasts a command (:class:`GroupCommands`); for each update it samples
``batch_size`` per rank, keeps one shard and scatters the others (:class:`BatchScatter`);
DDP averages the gradients (:meth:`Ranks.wrap`), so every rank steps to bitwise the same
weights. The other ranks run :func:`follow`, which obeys the commands.

With ``learner.shard_policy`` the policy is sharded instead (FSDP2, :meth:`Ranks.wrap_policy`):
each rank holds a slice of its parameters, gradients and Adam moments. What rank 0 alone did
with the whole policy (publish it, checkpoint it) then needs every rank: rank 0 commands a
gather first (:meth:`GroupCommands.gather_weights`, :meth:`GroupCommands.gather_state`).

A one-process learner uses :data:`SINGLE`, whose collectives are the identity: the algorithms
and the loop are the same code serial or parallel.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from safetensors.numpy import load as load_arrays
from safetensors.numpy import save as save_arrays
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors
from torch import nn
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.nn.parallel import DistributedDataParallel

from robotrl.config.load import ConfigError
from robotrl.core.protocols import Algorithm
from robotrl.learner.guard import UpdateGuard

Batch = dict[str, Any]

WAIT = timedelta(hours=24)
"""How long a rank waits in a collective: rank 0 may wait hours for its actors' first samples
while the others wait for its first command. A rank that dies ends every rank through torchrun."""

_RUN, _STOP, _GATHER_WEIGHTS, _GATHER_STATE = 1.0, 0.0, 2.0, 3.0
_LISTS = "lists"
"""Metadata key of a shard's list values (``task``), as JSON: safetensors holds arrays only."""
_SKELETON = "skeleton"
"""Metadata key of a shared state's nesting, as JSON (:func:`share_state`)."""


@dataclasses.dataclass(frozen=True)
class Ranks:
    """This process's place among the learner's ranks, and the collectives the algorithms use."""

    rank: int = 0
    world: int = 1
    shard: bool = False
    """Shard the policy over the ranks (FSDP2) instead of replicating it (DDP): ``learner.shard_policy``."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def parallel(self) -> bool:
        return self.world > 1

    @property
    def sharded(self) -> bool:
        return self.parallel and self.shard

    def wrap(self, module: nn.Module, *, unused_parameters: bool = False) -> nn.Module:
        """``module`` whose backward averages its gradients over the ranks (DDP); itself alone.
        Buffers are not rebroadcast each forward: no rank changes them apart from the others.
        ``unused_parameters``: the module may hold parameters its configuration leaves out of
        the loss (a policy's camera embedding without cameras, its language table without a
        task), which DDP then looks for after each forward."""
        if not self.parallel:
            return module
        # oneDNN returns a 1x1 convolution's weight gradient with channels-last strides: the
        # same memory as the bucket's view (only size-1 dimensions' strides differ), so DDP's
        # warning about a copy is noise.
        warnings.filterwarnings("ignore", "Grad strides do not match bucket view strides", UserWarning)
        return DistributedDataParallel(
            module, broadcast_buffers=False, find_unused_parameters=unused_parameters
        )

    def wrap_policy(self, module: nn.Module) -> nn.Module:
        """The policy's training ``module``: :meth:`wrap` (DDP) or, sharded, FSDP2's
        ``fully_shard`` of its trainable parameters as one unit. Each rank then keeps 1/N of
        them, their gradients and Adam moments between updates, gathers them whole for each
        forward and backward, and reduce-scatters the gradients (averaged, as DDP averages).
        One unit, not one per transformer block: lerobot's VLAs call their layers' parts
        directly rather than through each layer's forward, which per-block units hook."""
        if not self.sharded:
            return self.wrap(module, unused_parameters=True)
        with torch.no_grad():  # one model: every rank keeps its slice of rank 0's
            for tensor in [*module.parameters(), *module.buffers()]:
                dist.broadcast(tensor, 0)
        # A frozen backbone stays whole on every rank: it has no gradient or moments to shard,
        # and sharded it would be held twice during each step (its slices and the gathered whole).
        frozen = {p for p in module.parameters() if not p.requires_grad}
        fully_shard(module, ignored_params=frozen or None)
        return module

    @contextmanager
    def unsharded(self, module: nn.Module) -> Iterator[None]:
        """``module``'s sharded parameters gathered whole in place for the block (publishing
        reads them as plain tensors); every rank enters it together. Nothing when not sharded."""
        units = [m for m in module.modules() if isinstance(m, FSDPModule)] if self.sharded else []
        for unit in units:
            unit.unshard()
        try:
            yield
        finally:
            for unit in units:
                unit.reshard()

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` is set on any rank (every rank gets the same answer)."""
        if not self.parallel:
            return flag
        count = torch.tensor([int(flag)], dtype=torch.int64)
        dist.all_reduce(count)
        return bool(count.item())

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


def backend(device: torch.device) -> str:
    """gloo for a CPU learner; on CUDA, NCCL for the tensors on GPUs and gloo for the commands
    and batch shards, which stay in host memory."""
    return "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"


def init_ranks(device: torch.device, shard: bool = False) -> Ranks:
    """Join the process group torchrun describes (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK`` and its
    rendezvous): :func:`backend`'s, on CUDA with each rank's current device its local GPU
    (so ``cuda`` means that GPU). Without torchrun (no ``WORLD_SIZE``, or 1): :data:`SINGLE`.
    ``shard``: the ranks shard the policy (:meth:`Ranks.wrap_policy`)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return SINGLE
    if device.type == "cuda":
        local, gpus = int(os.environ.get("LOCAL_RANK", "0")), torch.cuda.device_count()
        if local >= gpus:
            raise ConfigError(
                f"learner rank {os.environ.get('RANK', local)} is this host's rank {local} on CUDA, "
                f"but the host has {gpus} GPU(s): start at most one rank per GPU "
                "(launch.learner_ranks, or torchrun --nproc-per-node)"
            )
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group(backend(device), timeout=WAIT)
    return Ranks(dist.get_rank(), dist.get_world_size(), shard)


def leave(ranks: Ranks) -> None:
    """Leave the process group at a clean end, together: a rank that tore its gloo group down
    while another still used it aborted that one ("terminate called without an active
    exception") in about one two-rank run in three; none in 18 since the barrier."""
    if ranks.parallel and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def share_state(
    ranks: Ranks, algorithm: Algorithm, device: torch.device, resumed: Mapping[str, Any] | None = None
) -> None:
    """Give every rank rank 0's state (networks, optimisers, running averages): the others start
    where rank 0 starts, from its checkpoint or its seed, so a rank needs no run folder (a
    learner node of a multi-node run holds no checkpoint) and none can train apart. It crosses
    as safetensors bytes with a JSON skeleton: no pickle between ranks. Every rank calls it once,
    rank 0 with the checkpoint state it ``resumed`` from, if any: a sharded rank 0 holds only
    its slice of what it loaded, so it sends the checkpoint's whole state rather than its own."""
    if not ranks.parallel:
        return
    if ranks.sharded:  # rank 0's state is every rank's slices: gathered together unless it resumed
        flag = torch.tensor([int(resumed is not None)], dtype=torch.int64)
        dist.broadcast(flag, 0)
        if not flag.item():
            resumed = whole_state(ranks, algorithm.state_dict())
    source = resumed if resumed is not None else algorithm.state_dict()
    data = _broadcast_bytes(ranks, _pack_state(source) if ranks.is_main else b"")
    if not ranks.is_main:
        algorithm.load_state_dict(_unpack_state(data, device))


def whole_state(ranks: Ranks, state: Any) -> Any:
    """``state`` (nested as a ``state_dict``) with each sharded tensor gathered whole onto rank
    0's CPU, one tensor at a time, so no rank holds the whole state on its device; the other
    ranks only take part and get None. Every rank calls it together, for states of one
    structure; with nothing sharded it is ``state`` (None off rank 0), without a collective."""
    if isinstance(state, DTensor):
        whole = state.full_tensor()
        return whole.cpu() if ranks.is_main else None
    if isinstance(state, Mapping):
        return {key: whole_state(ranks, value) for key, value in state.items()}
    if isinstance(state, list | tuple):
        return type(state)(whole_state(ranks, value) for value in state)
    return state if ranks.is_main else None


def sharded_like(value: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``value``, a whole tensor (from a checkpoint or rank 0), cut to this rank's slice where
    ``like`` is sharded; ``value`` itself otherwise. Every rank holds the whole ``value``, so
    each cuts its own slice without a collective."""
    if isinstance(like, DTensor) and not isinstance(value, DTensor):
        return distribute_tensor(value.to(like.device), like.device_mesh, like.placements, src_data_rank=None)
    return value


def optimizer_state_like(state: Mapping[str, Any], params: list[torch.Tensor]) -> dict[str, Any]:
    """An optimiser's ``state_dict`` (per-parameter state keyed by index into ``params``) with
    each tensor shaped as its parameter cut as that parameter is (:func:`sharded_like`)."""
    per_param = {
        index: {
            key: sharded_like(value, params[index])
            if isinstance(value, torch.Tensor) and value.shape == params[index].shape
            else value
            for key, value in moments.items()
        }
        for index, moments in state["state"].items()
    }
    return {**state, "state": per_param}


def _broadcast_bytes(ranks: Ranks, data: bytes) -> bytes:
    """Rank 0's ``data`` on every rank (its length first)."""
    size = torch.tensor([len(data)], dtype=torch.int64)
    dist.broadcast(size, 0)
    buffer = torch.frombuffer(bytearray(data), dtype=torch.uint8) if ranks.is_main else None
    if buffer is None:
        buffer = torch.empty(int(size), dtype=torch.uint8)
    dist.broadcast(buffer, 0)
    return buffer.numpy().tobytes()


def _pack_state(state: Any) -> bytes:
    """A nested state (mappings with int or str keys, lists, tuples, tensors, arrays, scalars)
    as safetensors bytes: tensors and arrays by name, the nesting as JSON metadata."""
    tensors: dict[str, torch.Tensor] = {}

    def node(value: Any) -> dict[str, Any]:
        name = str(len(tensors))
        if isinstance(value, torch.Tensor):
            # A clone: safetensors refuses tensors that share memory (a tied or viewed weight).
            tensors[name] = value.detach().cpu().clone()
            return {"tensor": name}
        if isinstance(value, np.ndarray):
            tensors[name] = torch.from_numpy(value.copy())
            return {"array": name}
        if isinstance(value, Mapping):
            return {"dict": [[k, node(v)] for k, v in value.items()]}
        if isinstance(value, tuple | list):
            return {type(value).__name__: [node(v) for v in value]}
        if isinstance(value, np.generic):
            value = value.item()
        if value is None or isinstance(value, bool | int | float | str):
            return {"value": value}
        raise TypeError(f"the learner's state holds a {type(value).__name__}, which ranks cannot share")

    skeleton = node(state)
    return save_tensors(tensors, metadata={_SKELETON: json.dumps(skeleton)})


def _unpack_state(data: bytes, device: torch.device) -> Any:
    """:func:`_pack_state`'s state back, its tensors on ``device`` (as a checkpoint loads)."""
    tensors = load_tensors(data)

    def value(node: dict[str, Any]) -> Any:
        ((kind, content),) = node.items()
        if kind == "tensor":
            return tensors[content].to(device)
        if kind == "array":
            return tensors[content].numpy()
        if kind == "dict":
            return {k: value(v) for k, v in content}
        if kind in ("list", "tuple"):
            items = [value(v) for v in content]
            return tuple(items) if kind == "tuple" else items
        return content

    return value(json.loads(_metadata(data)[_SKELETON]))


def _metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of safetensors bytes (a u64 header length, then a JSON header)."""
    header_len = int.from_bytes(data[:8], "little")
    metadata: dict[str, str] = json.loads(data[8 : 8 + header_len]).get("__metadata__", {})
    return metadata


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
        mine = _shard(batch, 0, self.ranks.world)
        payloads = [_encode(_shard(batch, r, self.ranks.world)) for r in range(1, self.ranks.world)]
        sizes = torch.tensor([0, *map(len, payloads)], dtype=torch.int64)
        dist.broadcast(sizes, 0)
        longest = int(sizes.max())
        padded = [torch.empty(longest, dtype=torch.uint8) for _ in payloads]
        for buf, payload in zip(padded, payloads, strict=True):
            buf.numpy()[: len(payload)] = np.frombuffer(payload, np.uint8)  # one copy, no zeroing
        # Rank 0's own slot: any tensor of the size (scatter wants one per rank); it keeps ``mine``.
        dist.scatter(torch.empty(longest, dtype=torch.uint8), [padded[0], *padded], src=0)
        return mine


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
    arrays.update(json.loads(_metadata(data).get(_LISTS, "{}")))
    return arrays


class GroupCommands:
    """Rank 0 tells the other ranks, before each update group, to run it (and how far the run
    is through its budget) or to stop; and, with a sharded policy, to gather it whole with
    rank 0 before it publishes or checkpoints. A no-op for one rank."""

    def __init__(self, ranks: Ranks) -> None:
        self.ranks = ranks

    def run_group(self, progress: float | None) -> None:
        self._send(_RUN, -1.0 if progress is None else progress)

    def stop(self) -> None:
        self._send(_STOP, 0.0)

    def gather_weights(self) -> None:
        """Before rank 0 reads the policy's weights (:meth:`Algorithm.policy_weights`)."""
        if self.ranks.sharded:
            self._send(_GATHER_WEIGHTS, 0.0)

    def gather_state(self) -> None:
        """Before rank 0 takes :func:`whole_state` of the algorithm's state."""
        if self.ranks.sharded:
            self._send(_GATHER_STATE, 0.0)

    def _send(self, command: float, progress: float) -> None:
        if self.ranks.parallel:
            dist.broadcast(torch.tensor([command, progress], dtype=torch.float64), 0)


def follow(
    algorithm: Algorithm, ranks: Ranks, max_nonfinite_groups: int, sample: Callable[[], Batch] | None = None
) -> int:
    """A follower rank's whole role: run each group rank 0 commands on the shards it scatters
    (or on what ``sample`` draws from a replica of the buffers: the bench's comparison),
    guarded as rank 0 guards (the same metrics and state give the same decisions); the number
    of groups kept, once rank 0 says stop."""
    draw = sample if sample is not None else lambda: receive_shard(ranks)
    guard = UpdateGuard(algorithm, max_nonfinite_groups, ranks.any if ranks.sharded else None)
    guard.remember()
    kept = 0
    while True:
        message = torch.empty(2, dtype=torch.float64)
        dist.broadcast(message, 0)
        command, progress = message.tolist()
        if command == _STOP:
            return kept
        if command == _GATHER_WEIGHTS:
            algorithm.policy_weights()
            continue
        if command == _GATHER_STATE:
            whole_state(ranks, algorithm.state_dict())
            continue
        if progress >= 0:
            algorithm.set_progress(progress)
        result = algorithm.update_group(draw)
        if guard.check(kept + 1, result):
            kept += 1
