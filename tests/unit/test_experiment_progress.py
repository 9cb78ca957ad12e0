"""Progress of launch runs in the background: lines read from launch_status.json, and which runs
count as finished (a run stopped by a signal exits cleanly but must not be cached)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from waiting import wait_until

from robotrl.config.load import ConfigError, load_config
from robotrl.core.run_folder import LAUNCH_STATUS, RoleStatus, write_launch_status
from robotrl.experiment.demo import Demo
from robotrl.experiment.progress import LaunchProgress, launch_finished, progress_line


def _row(role: str, state: str, progress: dict[str, Any]) -> RoleStatus:
    return RoleStatus(
        role, pid=1, state=state, restarts=0, uptime_s=1.0, last_exit=None, log="x.log", progress=progress
    )


def _status(run_dir: Path, learner_state: str, actor_state: str) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    write_launch_status(
        run_dir,
        [
            _row("learner", learner_state, {"group": 120, "policy_version": 110, "transitions": 900}),
            _row("actor-0", actor_state, {"episodes": 133, "successes": 117, "taken_over": 64}),
        ],
    )


def test_a_progress_line_says_where_each_role_of_a_run_is(tmp_path: Path):
    assert progress_line("rapi", tmp_path / "not started") is None
    _status(tmp_path / "rapi", "running", "running")
    line = progress_line("rapi", tmp_path / "rapi")
    assert line is not None and line.startswith("rapi: learner group 120")
    assert "actor-0 episodes 133  success 117  taken over 64" in line


def test_only_a_run_whose_every_role_exited_on_its_own_is_finished(tmp_path: Path):
    assert not launch_finished(tmp_path / "missing")
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / LAUNCH_STATUS).write_text("{not json")
    assert not launch_finished(tmp_path / "torn")
    _status(tmp_path / "stopped", "done", "stopped")  # Ctrl-C or the demo stopping the others
    assert not launch_finished(tmp_path / "stopped")
    _status(tmp_path / "done", "done", "done")
    assert launch_finished(tmp_path / "done")


def test_progress_lines_name_the_running_runs_and_skip_the_finished(tmp_path: Path):
    _status(tmp_path / "rapi", "running", "running")
    _status(tmp_path / "bc", "done", "done")
    out = io.StringIO()
    runs = {"rapi": tmp_path / "rapi", "bc": tmp_path / "bc"}
    with LaunchProgress(runs, Console(file=out, width=40), interval_s=0.01):
        wait_until(lambda: "rapi: learner group 120" in out.getvalue(), 10.0, "a progress line of rapi")
    assert "bc:" not in out.getvalue()
    # a narrow console (a log file's is 80 columns) does not split a run's line: it stays greppable
    line = next(text for text in out.getvalue().splitlines() if "rapi:" in text)
    assert "actor-0 episodes 133  success 117" in line


def test_fine_tuning_runs_side_by_side_are_at_least_one_and_at_most_the_runs():
    cfg = load_config(["experiment=demo"])
    assert cfg.experiment.finetune_workers == 2 and Demo(cfg, Console()).finetune_workers == 2
    lone = load_config(
        ["experiment=demo", "experiment.algorithms=[rapi]", "experiment.offline_control=false"]
    )
    assert Demo(lone, Console()).finetune_workers == 1  # in the foreground, with launch's table
    with_control = load_config(["experiment=demo", "experiment.algorithms=[rapi]"])
    assert Demo(with_control, Console()).finetune_workers == 2  # the offline control is a run too
    with pytest.raises(ConfigError, match=r"experiment\.finetune_workers"):
        load_config(["experiment.finetune_workers=0"])
