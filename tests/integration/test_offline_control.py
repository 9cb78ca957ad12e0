"""`robotrl learner learner.offline=true`: the demo's offline control trains exactly the
fine-tune's update budget on the demonstrations alone, and never sees an online row."""

from __future__ import annotations

import json

import pytest

from robotrl.cli import main
from robotrl.core.run_folder import CHECKPOINT_COUNTERS, latest_checkpoint, read_learner_metrics

SIM = ["env=so101_pick_place", "env.cameras=[]", "env.privileged_state=true", "env.max_episode_ticks=150"]
TINY = ["policy=flow_tiny", "policy.horizon=8", "policy.max_delay=2"]


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    out = tmp_path_factory.mktemp("offline") / "demos"
    assert main(["record", *SIM, "policy=expert", "record.episodes=2", f"record.output_dir={out}"]) == 0
    return out


def offline_learner(demos, run_dir, *extra: str) -> int:
    return main(
        [
            "learner",
            *SIM,
            *TINY,
            "learner.offline=true",
            "learner.algorithm=bc",
            f"learner.demos_path={demos}",
            "learner.max_groups=3",
            "learner.actor_updates_per_group=4",
            "learner.batch_size=16",
            "learner.learning_starts=16",
            "learner.log_every_groups=1",
            "learner.device=cpu",
            f"run_dir={run_dir}",
            *extra,
        ]
    )


def test_offline_control_runs_exactly_the_budget_on_demonstrations_alone(demos, tmp_path):
    run_dir = tmp_path / "control"
    assert offline_learner(demos, run_dir) == 0
    metrics = read_learner_metrics(run_dir)
    assert [m["group"] for m in metrics] == [1, 2, 3]
    assert metrics[-1]["actor_updates_total"] == 3 * 4  # max_groups x actor_updates_per_group, no more
    assert all(m["transitions"] == 0 for m in metrics)  # no online row ever arrived
    counters = json.loads((latest_checkpoint(run_dir) / CHECKPOINT_COUNTERS).read_text())
    assert counters["groups"] == 3 and counters["transitions"] == 0


def test_offline_learner_refuses_what_would_leave_it_waiting(demos, tmp_path, capsys):
    assert offline_learner(demos, tmp_path / "few", "learner.learning_starts=1000000") == 2
    assert "learner.learning_starts=1000000" in capsys.readouterr().err
    no_budget = main(["learner", *SIM, "learner.offline=true", f"learner.demos_path={demos}"])
    assert no_budget == 2
    assert "learner.offline: needs learner.max_groups" in capsys.readouterr().err
