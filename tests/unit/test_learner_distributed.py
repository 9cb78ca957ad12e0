"""A learner of two gloo ranks (robotrl/learner/distributed.py): the same weights on both, the
same as one rank with twice the batch, publishing from rank 0 alone, resumable on one rank."""

from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from learner_doubles import MLPChunkPolicy, episode_batch, small_learner_config, toy_spec
from safetensors.torch import load_file, save_file
from torch.distributed.tensor import DTensor

from robotrl.config.learner import AlgorithmKind, RapiConfig
from robotrl.config.load import ConfigError
from robotrl.learner.algorithms import build_algorithm
from robotrl.learner.distributed import (
    SINGLE,
    Ranks,
    _decode,
    _encode,
    _pack_state,
    _shard,
    _unpack_state,
    backend,
    follow,
    init_ranks,
    leave,
    share_state,
)
from robotrl.learner.main import build_learner
from robotrl.transport.inproc import DroppedWeights, TransitionQueue

GROUPS = 3
DEADLINE_S = 120


def _whole(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU copy of ``tensor``, gathered from every rank where it is sharded (each calls this)."""
    return (tensor.full_tensor() if isinstance(tensor, DTensor) else tensor).detach().cpu().clone()


def _state(algorithm: object) -> dict[str, torch.Tensor]:
    """The trained networks of ``algorithm``, flat (policy and, after an update, its gradients;
    for RAPI, critic and target); a sharded policy gathered whole (every rank calls this)."""
    policy = algorithm.policy  # type: ignore[attr-defined]
    out = {f"policy.{k}": _whole(v) for k, v in policy.state_dict().items()}
    # The last update's gradients: a loss of the wrong scale still steps Adam alike, not these.
    grads = {k: p.grad for k, p in policy.named_parameters() if p.grad is not None}
    out.update({f"grad.{k}": _whole(g) for k, g in grads.items()})
    for name in ("critic", "target"):
        net = getattr(algorithm, name, None)
        if net is not None:
            out.update({f"{name}.{k}": v.detach().cpu().clone() for k, v in net.state_dict().items()})
    return out


def _train(
    rank: int,
    world: int,
    store: str,
    run_dir: str,
    out: str,
    kind: str,
    batch: int,
    apart: bool,
    device: str = "cpu",
    shard: bool = False,
    frozen: bool = False,
) -> None:
    """One rank of a learner: rank 0 the full learner on four stored episodes, others followers
    (with ``apart``, rank 1's policy moved off rank 0's after building); each writes its final
    networks (and rank 0 the versions it published) to ``out``."""
    torch.set_num_threads(1)
    ranks = SINGLE
    if device == "cuda":
        torch.cuda.set_device(rank)
    if world > 1:
        torch.distributed.init_process_group(
            backend(torch.device(device)), init_method=f"file://{store}", rank=rank, world_size=world
        )
        ranks = Ranks(rank, world, shard)
    torch.manual_seed(0)
    rapi = RapiConfig(critic_hidden=32, critic_updates_per_group=4, critic_warmup_updates=0, weight_ess=0.5)
    cfg = small_learner_config(
        run_dir,
        rapi,
        batch_size=batch,
        algorithm=AlgorithmKind(kind),
        actor_updates_per_group=2,
        image_shift=0,
        device=device,
    )
    policy = MLPChunkPolicy(2, 4, 3)
    if frozen:  # a frozen first layer, as a VLA's backbone
        policy.net[0].requires_grad_(False)
    if ranks.is_main:
        weights = DroppedWeights()
        learner = build_learner(
            cfg, policy, toy_spec(), TransitionQueue(), weights, console=False, ranks=ranks
        )
        rewards = np.zeros(20)
        rewards[-1] = 1.0
        for episode in range(4):  # stored before the run: every rank count samples the same rows
            learner.ingest(
                episode_batch("a", episode, range(20), end="terminated", rewards=rewards * episode)
            )
        counters = learner.run(GROUPS)
        learner.online.close()
        learner.anchor.close()
        algorithm = learner.algorithm
        published = torch.tensor([weights.sent, counters.policy_version, counters.groups])
    else:
        algorithm = build_algorithm(cfg.learner, policy, torch.device(device), 2, {}, ranks)
        if apart:  # as a rank that was given another checkpoint or seed
            with torch.no_grad():
                next(policy.parameters()).add_(1.0)
        share_state(ranks, algorithm, torch.device(device))
        published = torch.tensor([0, 0, follow(algorithm, ranks, cfg.learner.guard.max_nonfinite_groups)])
    params = list(algorithm.policy.parameters())  # type: ignore[attr-defined]
    held = sum(p.to_local().numel() if isinstance(p, DTensor) else p.numel() for p in params)
    sizes = torch.tensor([held, sum(p.numel() for p in params)])  # this rank's elements, the policy's
    save_file({**_state(algorithm), "published": published, "sizes": sizes}, f"{out}/rank{rank}.safetensors")
    leave(ranks)


def _train_and_exit(*args: object) -> None:
    """:func:`_train`, then an exit without the interpreter's teardown, which can abort a rank
    whose DDP or FSDP state outlives the process group (robotrl/bench/learner_ranks.py)."""
    _train(*args)  # type: ignore[arg-type]
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _launch(
    tmp: Path,
    name: str,
    world: int,
    kind: str,
    batch: int,
    apart: bool = False,
    device: str = "cpu",
    shard: bool = False,
    frozen: bool = False,
) -> list[dict[str, torch.Tensor]]:
    """Run ``world`` ranks in spawned processes; every rank's written state, rank order. A
    second launch under one ``name`` resumes from the first's run folder."""
    folder = tmp / name
    folder.mkdir(exist_ok=True)
    for old in folder.glob("rank*.safetensors"):
        old.unlink()
    (folder / "store").unlink(missing_ok=True)
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(
            target=_train_and_exit,
            args=(
                r,
                world,
                str(folder / "store"),
                str(folder / "run"),
                str(folder),
                kind,
                batch,
                apart,
                device,
                shard,
                frozen,
            ),
        )
        for r in range(world)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(DEADLINE_S)
    for p in procs:
        if p.is_alive():
            p.kill()
    assert [p.exitcode for p in procs] == [0] * world, f"rank exit codes {[p.exitcode for p in procs]}"
    return [load_file(str(folder / f"rank{r}.safetensors")) for r in range(world)]


@pytest.mark.parametrize("kind", ["rapi", "bc"])
def test_two_ranks_hold_bitwise_equal_weights_equal_to_one_rank_with_twice_the_batch(
    tmp_path: Path, kind: str
):
    rank0, rank1 = _launch(tmp_path, "two", 2, kind, batch=8)
    (alone,) = _launch(tmp_path, "one", 1, kind, batch=16)
    nets = [k for k in rank0 if k not in ("published", "sizes")]
    assert nets and all(torch.equal(rank0[k], rank1[k]) for k in nets)  # DDP: the very same step
    torch.manual_seed(0)
    start = MLPChunkPolicy(2, 4, 3).state_dict()  # as each rank built it: the updates moved it
    assert all(not torch.equal(rank0[f"policy.{k}"], v) for k, v in start.items())
    for k in nets:  # the whole batch's losses and gradients: one rank with both shards
        torch.testing.assert_close(rank0[k], alone[k], rtol=1e-4, atol=1e-5, msg=k)
    sent, version, groups = rank0["published"].tolist()
    assert (sent, version, groups) == (GROUPS, GROUPS, GROUPS)  # rank 0 publishes once per group
    assert rank1["published"].tolist() == [0, 0, GROUPS]  # the follower ran every group, sent nothing


@pytest.mark.gpu
@pytest.mark.parametrize("shard", [False, True], ids=["replicated", "sharded"])
@pytest.mark.parametrize("kind", ["rapi", "bc"])
def test_two_nccl_ranks_on_two_gpus_hold_bitwise_equal_weights(tmp_path: Path, kind: str, shard: bool):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    rank0, rank1 = _launch(tmp_path, "two", 2, kind, batch=8, device="cuda", shard=shard)
    nets = [k for k in rank0 if k not in ("published", "sizes")]
    assert nets and all(torch.equal(rank0[k], rank1[k]) for k in nets)
    assert rank0["published"].tolist() == [GROUPS] * 3 and rank1["published"].tolist() == [0, 0, GROUPS]


def test_a_checkpoint_of_two_ranks_resumes_on_one(tmp_path: Path):
    rank0, _ = _launch(tmp_path, "two", 2, "rapi", batch=8)
    rapi = RapiConfig(critic_hidden=32, critic_updates_per_group=4, critic_warmup_updates=0, weight_ess=0.5)
    cfg = small_learner_config(str(tmp_path / "two" / "run"), rapi, batch_size=16, actor_updates_per_group=2)
    learner = build_learner(
        cfg, MLPChunkPolicy(2, 4, 3), toy_spec(), TransitionQueue(), DroppedWeights(), console=False
    )
    try:
        assert learner.counters.groups == GROUPS and len(learner.online) > 0  # its buffers came back too
        resumed = _state(learner.algorithm)
        assert all(torch.equal(resumed[k], rank0[k]) for k in resumed)
    finally:
        learner.online.close()
        learner.anchor.close()


def test_a_rank_that_starts_apart_takes_rank_zeros_state_and_trains_the_same_weights(tmp_path: Path):
    rank0, rank1 = _launch(tmp_path, "apart", 2, "rapi", batch=8, apart=True)
    together, _ = _launch(tmp_path, "together", 2, "rapi", batch=8)
    nets = [k for k in rank0 if k not in ("published", "sizes")]
    assert all(torch.equal(rank0[k], rank1[k]) for k in nets)
    assert all(torch.equal(rank0[k], together[k]) for k in nets)  # as if it had never been apart


@pytest.mark.parametrize("kind", ["rapi", "bc"])
def test_two_ranks_sharding_the_policy_train_the_weights_two_replicating_ranks_train(
    tmp_path: Path, kind: str
):
    sharded = _launch(tmp_path, "sharded", 2, kind, batch=8, shard=True)
    replicated = _launch(tmp_path, "replicated", 2, kind, batch=8)
    held, total = sharded[0]["sizes"].tolist()
    assert held + sharded[1]["sizes"][0].item() == total and held < total  # each rank kept a slice
    assert replicated[0]["sizes"].tolist() == [total, total]
    nets = [k for k in sharded[0] if k not in ("published", "sizes")]
    assert set(nets) == {k for k in replicated[0] if k not in ("published", "sizes")}
    for k in nets:  # reduce-scatter sums in another order than all-reduce: equal within rounding
        torch.testing.assert_close(sharded[0][k], replicated[0][k], rtol=1e-4, atol=1e-5, msg=k)
    critic = [k for k in nets if not k.startswith(("policy.", "grad."))]
    assert all(torch.equal(sharded[0][k], sharded[1][k]) for k in critic)  # still replicated
    assert sharded[0]["published"].tolist() == [GROUPS] * 3  # the gathered policy, once per group
    assert sharded[1]["published"].tolist() == [0, 0, GROUPS]


def test_a_frozen_layer_stays_whole_on_each_sharded_rank_and_the_rest_trains_as_replicated(tmp_path: Path):
    sharded = _launch(tmp_path, "sharded", 2, "rapi", batch=8, shard=True, frozen=True)
    replicated, _ = _launch(tmp_path, "replicated", 2, "rapi", batch=8, frozen=True)
    frozen = sum(t.numel() for k, t in replicated.items() if k.startswith("policy.net.0."))
    (held0, total), (held1, _) = sharded[0]["sizes"].tolist(), sharded[1]["sizes"].tolist()
    assert held0 + held1 == total + frozen  # the frozen layer on both, the rest split
    assert held0 > frozen and held1 > frozen
    torch.manual_seed(0)
    start = MLPChunkPolicy(2, 4, 3).state_dict()
    for k, v in start.items():
        assert torch.equal(sharded[0][f"policy.{k}"], v) == k.startswith("net.0.")  # only the rest moved
        torch.testing.assert_close(sharded[0][f"policy.{k}"], replicated[f"policy.{k}"], rtol=1e-4, atol=1e-5)


def test_a_sharded_checkpoint_resumes_on_one_rank_and_sharded_again_as_a_replicated_one_does(
    tmp_path: Path,
):
    first, _ = _launch(tmp_path, "sharded", 2, "rapi", batch=8, shard=True)
    rapi = RapiConfig(critic_hidden=32, critic_updates_per_group=4, critic_warmup_updates=0, weight_ess=0.5)
    cfg = small_learner_config(
        str(tmp_path / "sharded" / "run"), rapi, batch_size=16, actor_updates_per_group=2
    )
    learner = build_learner(
        cfg, MLPChunkPolicy(2, 4, 3), toy_spec(), TransitionQueue(), DroppedWeights(), console=False
    )
    try:  # the checkpoint holds the policy whole: one unsharded rank takes it as it was
        resumed = _state(learner.algorithm)
        assert resumed and all(torch.equal(resumed[k], first[k]) for k in resumed)
    finally:
        learner.online.close()
        learner.anchor.close()
    # Resumed on two sharded ranks (each cuts its slice of the whole checkpoint, Adam's moments
    # too), training goes on as from the same checkpoint on two replicated ranks.
    _launch(tmp_path, "replicated", 2, "rapi", batch=8)
    again, _ = _launch(tmp_path, "sharded", 2, "rapi", batch=8, shard=True)
    replicated, _ = _launch(tmp_path, "replicated", 2, "rapi", batch=8)
    nets = [k for k in again if k not in ("published", "sizes")]
    assert any(not torch.equal(again[k], first[k]) for k in nets)  # the second session trained
    for k in nets:
        torch.testing.assert_close(again[k], replicated[k], rtol=1e-4, atol=1e-5, msg=k)
    # A resumed learner re-announces its policy, then publishes once per group.
    assert again["published"].tolist() == [GROUPS + 1, 2 * GROUPS + 1, 2 * GROUPS]


def test_a_learner_state_crosses_between_ranks_as_it_was():
    # An optimiser's state: int keys, tuples, 0-d step tensors; arrays and numpy scalars beside.
    net = torch.nn.Linear(3, 2)
    adam = torch.optim.Adam(net.parameters(), lr=1e-3)
    net(torch.ones(4, 3)).sum().backward()
    adam.step()
    state = {
        "policy": net.state_dict(),
        "optimizer": adam.state_dict(),
        "mean": np.arange(3, dtype=np.float64),
        "count": np.int64(7),
        "names": ("a", None, 1.5),
    }
    back = _unpack_state(_pack_state(state), torch.device("cpu"))
    assert back["optimizer"]["param_groups"][0]["betas"] == adam.state_dict()["param_groups"][0]["betas"]
    assert set(back["optimizer"]["state"]) == {0, 1}  # int keys stay ints, as load_state_dict maps them
    step = back["optimizer"]["state"][0]["step"]
    assert step.dim() == 0 and step.item() == 1
    fresh = torch.optim.Adam(torch.nn.Linear(3, 2).parameters(), lr=1e-3)
    fresh.load_state_dict(back["optimizer"])
    assert torch.equal(fresh.state_dict()["state"][1]["exp_avg"], adam.state_dict()["state"][1]["exp_avg"])
    assert all(torch.equal(back["policy"][k], v) for k, v in net.state_dict().items())
    assert back["mean"].dtype == np.float64 and back["mean"].tolist() == [0.0, 1.0, 2.0]
    assert back["count"] == 7 and back["names"] == ("a", None, 1.5)
    with pytest.raises(TypeError, match="cannot share"):
        _pack_state({"odd": object()})


def test_a_shard_crosses_as_safetensors_bytes_with_its_dtypes_and_task_strings():
    batch = {
        "observation.state": np.arange(12, dtype=np.float32).reshape(6, 2),
        "policy_version": np.arange(6, dtype=np.int64),
        "done": np.array([True, False] * 3),
        "task": [f"task {i}" for i in range(6)],
    }
    shard = _shard(batch, 1, 2)
    back = _decode(_encode(shard))
    assert back["task"] == ["task 1", "task 3", "task 5"]
    for key in ("observation.state", "policy_version", "done"):
        assert back[key].dtype == batch[key].dtype
        np.testing.assert_array_equal(back[key], batch[key][1::2])


def test_more_cuda_ranks_than_gpus_is_a_config_error_before_any_gpu_is_touched(monkeypatch):
    # torchrun's second rank on a one-GPU host (the GPU count is faked: there is none here).
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", lambda _: pytest.fail("a GPU was selected"))
    with pytest.raises(
        ConfigError, match=r"learner rank 1 .* the host has 1 GPU\(s\): start at most one rank per GPU"
    ):
        init_ranks(torch.device("cuda"))
