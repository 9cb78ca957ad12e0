"""`torchrun --standalone --nproc-per-node 2 -m robotrl.cli learner ...`: the learner as two
real ranks (gloo on the CPU) through torch's own launcher, on the demo's flow policy, whose
configuration leaves parameters unused (no camera, no task), as DDP must be told."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from robotrl.cli import main
from robotrl.core.run_folder import read_learner_metrics

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SIM = ["env=so101_pick_place", "env.cameras=[]", "env.privileged_state=true", "env.max_episode_ticks=150"]
TINY = ["policy=flow_tiny", "policy.horizon=8", "policy.max_delay=2"]


def test_two_ranks_under_torchrun_train_the_budget_and_rank_zero_alone_writes(tmp_path: Path):
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
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=240, env=env)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "x 2 ranks (batch 16 each)" in out
    assert "rank 1: stopped after 3 groups" in out  # the follower ran every group rank 0 commanded
    metrics = read_learner_metrics(run_dir)
    assert [m["group"] for m in metrics] == [1, 2, 3]  # one writer: rank 0
    assert all(m["transitions"] == 0 for m in metrics)
