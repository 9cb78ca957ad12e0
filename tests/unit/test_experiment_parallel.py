"""Parallel steps (the latency sweep's cells): real child processes, each logged and stamped,
cached on a second run, and one failure stops the rest."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from robotrl.core.run_folder import STEP_STAMP
from robotrl.experiment.parallel import Job, JobDone, run_parallel
from robotrl.experiment.steps import StepFailedError


def python_job(tmp_path: Path, name: str, code: str, inputs: tuple[tuple[str, str | None], ...] = ()) -> Job:
    return Job(name, tmp_path / name, (sys.executable, "-c", code), inputs)


def test_every_job_runs_once_logs_its_output_and_is_cached_after(tmp_path: Path):
    jobs = [python_job(tmp_path, f"cell{i}", f"print('cell {i} ran')", (("policy", "v1"),)) for i in range(3)]
    done: list[JobDone] = []
    run_parallel(jobs, 2, done.append)
    assert sorted(d.job.title for d in done) == ["cell0", "cell1", "cell2"]
    assert not any(d.cached for d in done)
    assert all(j.log.read_text() == f"{j.title.replace('cell', 'cell ')} ran\n" for j in jobs)
    assert all((j.out_dir / STEP_STAMP).is_file() for j in jobs)

    again: list[JobDone] = []
    run_parallel(jobs, 2, again.append)
    assert len(again) == 3 and all(d.cached for d in again)

    # Another version of an input (a new checkpoint) reruns the job.
    changed = [Job(j.title, j.out_dir, j.argv, (("policy", "v2"),)) for j in jobs[:1]]
    rerun: list[JobDone] = []
    run_parallel(changed, 1, rerun.append)
    assert [d.cached for d in rerun] == [False]


@pytest.mark.timeout(60)
def test_a_failing_job_stops_the_running_ones_and_the_queue_and_names_its_log(tmp_path: Path):
    marker = tmp_path / "queued-ran"
    slow = python_job(tmp_path, "slow", "import time; time.sleep(120)")
    failing = python_job(tmp_path, "failing", "import sys; print('bad latency model'); sys.exit(3)")
    queued = python_job(tmp_path, "queued", f"open({str(marker)!r}, 'w').close()")
    with pytest.raises(StepFailedError) as failure:
        run_parallel([slow, failing, queued], 2, lambda done: None)
    assert "failing failed with exit code 3" in str(failure.value)
    assert "bad latency model" in str(failure.value) and str(failing.log) in str(failure.value)
    assert not (slow.out_dir / STEP_STAMP).exists()  # terminated, not finished
    assert not (failing.out_dir / STEP_STAMP).exists()
    assert not marker.exists()


def test_workers_must_be_positive(tmp_path: Path):
    with pytest.raises(ValueError, match="workers"):
        run_parallel([python_job(tmp_path, "a", "pass")], 0, lambda done: None)


def test_a_job_that_exits_0_with_its_work_unfinished_is_a_failure_and_not_cached(tmp_path: Path):
    """Like an evaluation stopped early by Ctrl-C: exit 0, fewer episodes than asked."""
    job = Job(
        "stopped",
        tmp_path / "stopped",
        (sys.executable, "-c", "print('3 of 10 episodes')"),
        complete=lambda out_dir: (out_dir / "summary.json").is_file(),
    )
    with pytest.raises(StepFailedError, match="stopped before its work was done"):
        run_parallel([job], 1, lambda done: None)
    assert not (job.out_dir / STEP_STAMP).exists()
