"""`torchrun --standalone --nproc-per-node 2 -m robotrl.cli learner ...`: the learner as two
real ranks (gloo on the CPU) through torch's own launcher, on the demo's flow policy, whose
configuration leaves parameters unused (no camera, no task), as DDP must be told, replicated
or sharded (FSDP2); and as two
nodes of one rank each, joined by torchrun's static rendezvous as on a cluster."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from robotrl.cli import main
from robotrl.core.run_folder import read_learner_metrics

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SIM = ["env=so101_pick_place", "env.cameras=[]", "env.privileged_state=true", "env.max_episode_ticks=150"]
TINY = ["policy=flow_tiny", "policy.horizon=8", "policy.max_delay=2"]


@pytest.mark.parametrize("shard", [False, True], ids=["replicated", "sharded"])
def test_two_ranks_under_torchrun_train_the_budget_and_rank_zero_alone_writes(tmp_path: Path, shard: bool):
    demos = tmp_path / "demos"
    assert main(["record", *SIM, "policy=expert", "record.episodes=2", f"record.output_dir={demos}"]) == 0
    run_dir = tmp_path / "run"
    argv = [
        *("-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"),
        *("-m", "robotrl.cli", "learner", *SIM, *TINY),
        *("learner.offline=true", "learner.algorithm=rapi", f"learner.demos_path={demos}"),
        *("learner.max_groups=3", "learner.actor_updates_per_group=4", "learner.batch_size=16"),
        *("learner.learning_starts=16", "learner.log_every_groups=1", "learner.device=cpu"),
        *("learner.rapi.critic_warmup_updates=0", "learner.torch_threads=1", f"run_dir={run_dir}"),
        f"learner.shard_policy={str(shard).lower()}",
        "learner.policy_ema=0.99",  # published and checkpointed: the average, gathered when sharded
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}  # torchrun leaves a folder there
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=240, env=env)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert ("x 2 ranks (batch 16 each, the policy sharded)" if shard else "x 2 ranks (batch 16 each)") in out
    assert "rank 1: stopped after 3 groups" in out  # the follower ran every group rank 0 commanded
    metrics = read_learner_metrics(run_dir)
    assert [m["group"] for m in metrics] == [1, 2, 3]  # one writer: rank 0
    assert all(m["transitions"] == 0 for m in metrics)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _node(rank: int, port: int, *overrides: str) -> list[str]:
    """torchrun for node ``rank`` of two, one learner rank each, node 0 at this host's loopback."""
    torchrun = ["-m", "robotrl.learner.torchrun", "--nnodes=2", f"--node-rank={rank}"]
    torchrun += ["--master-addr=127.0.0.1", f"--master-port={port}", "--nproc-per-node=1"]
    offline = ["learner.offline=true", "learner.algorithm=rapi", "learner.actor_updates_per_group=4"]
    offline += ["learner.batch_size=16", "learner.learning_starts=16", "learner.log_every_groups=1"]
    offline += ["learner.device=cpu", "learner.rapi.critic_warmup_updates=0", "learner.torch_threads=1"]
    return [sys.executable, *torchrun, "-m", "robotrl.cli", "learner", *SIM, *TINY, *offline, *overrides]


def test_a_second_node_needs_no_run_folder_and_resumes_with_rank_zero(tmp_path: Path):
    # Node 1 runs where there is neither the data nor the run folder: rank 0 sends it its state,
    # the seed's at first and the checkpoint's when the run resumes.
    demos = tmp_path / "demos"
    assert main(["record", *SIM, "policy=expert", "record.episodes=2", f"record.output_dir={demos}"]) == 0
    elsewhere = tmp_path / "node1"
    elsewhere.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}  # torchrun leaves a folder there
    for groups in (3, 2):  # learner.max_groups: this session's groups
        port = _free_port()
        nowhere = ["learner.demos_path=/nonexistent/demos", "run_dir=/nonexistent/run"]
        node1 = subprocess.Popen(
            _node(1, port, f"learner.max_groups={groups}", *nowhere),
            cwd=elsewhere,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        here = [f"learner.max_groups={groups}", f"learner.demos_path={demos}", f"run_dir={tmp_path / 'run'}"]
        try:
            done = subprocess.run(_node(0, port, *here), capture_output=True, text=True, timeout=200, env=env)
        except subprocess.TimeoutExpired as late:
            node1.kill()
            pytest.fail(f"node 0 hung: {late.output!r}\nnode 1: {node1.communicate()[0]}")
        follower_out, _ = node1.communicate(timeout=60)
        assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
        assert node1.returncode == 0, follower_out[-4000:]
        assert f"rank 1: stopped after {groups} groups" in follower_out
    assert not (elsewhere / "runs").exists() and not Path("/nonexistent").exists()
    metrics = read_learner_metrics(tmp_path / "run")
    assert [m["group"] for m in metrics] == [1, 2, 3, 4, 5]  # the second run went on from group 3


def test_two_ranks_shard_a_tiny_smolvla_with_lora_and_checkpoint_its_trainable_tensors_whole(tmp_path: Path):
    # lerobot's own SmolVLA, frozen backbone and LoRA adapters in one sharded unit (FSDP2).
    from robotrl.sim import make_env
    from safetensors.numpy import load_file

    from robotrl.config.load import load_config
    from robotrl.learner.checkpoint import CHECKPOINT_POLICY, Checkpointer
    from robotrl.policy.lerobot import LerobotChunkPolicy
    from robotrl.policy.vla import MAKERS

    cams = ["env.cameras=[front,wrist]", "env.image_size=32", "env.max_episode_ticks=60"]
    env = make_env(load_config(cams).env)
    vla = MAKERS["smolvla"](tmp_path / "smolvla", "tiny", env.spec, horizon=32)
    env.close()
    policy = ["policy=lerobot", f"policy.path={vla}", "policy.lora_rank=4"]
    trainable = LerobotChunkPolicy.load(
        vla, env.spec, load_config([*policy, *cams]).policy
    ).trainable_tensors()
    demos = tmp_path / "demos"
    assert main(["record", *cams, "policy=expert", "record.episodes=2", f"record.output_dir={demos}"]) == 0
    run_dir = tmp_path / "run"
    argv = [
        *("-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"),
        *("-m", "robotrl.cli", "learner", *cams, *policy, "learner.shard_policy=true"),
        *("learner.offline=true", "learner.algorithm=rapi", f"learner.demos_path={demos}"),
        *("learner.max_groups=2", "learner.actor_updates_per_group=2", "learner.batch_size=4"),
        *("learner.rapi.critic_updates_per_group=2", "learner.learning_starts=4", "learner.device=cpu"),
        *("learner.rapi.critic_warmup_updates=0", "learner.torch_threads=1", f"run_dir={run_dir}"),
    ]
    env_vars = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=240, env=env_vars)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "the policy sharded" in out and "rank 1: stopped after 2 groups" in out
    final = Checkpointer(run_dir).latest()
    assert final is not None
    saved = load_file(str(final / CHECKPOINT_POLICY))
    assert set(saved) == set(trainable)  # the adapters and the expert, whole: not one rank's slices
    assert all(saved[k].shape == trainable[k].shape for k in saved)
    assert any(not np.array_equal(saved[k], trainable[k]) for k in saved)  # trained
