"""The run folder's files: each kind written then read gives the same value, and files in the
format earlier versions wrote (the same names and JSON keys) still read."""

from __future__ import annotations

import json
from pathlib import Path

from robotrl.core import run_folder as rf


def test_the_file_names_stay_those_existing_run_folders_hold(tmp_path: Path):
    assert rf.actor_progress_path(tmp_path, "actor-0").name == "actor_actor-0_progress.json"
    assert rf.actor_summary_path(tmp_path, "actor-1").name == "actor_actor-1_summary.json"
    assert rf.actor_sent_path(tmp_path, "a").name == "actor_a_sent.json"
    assert rf.role_log(tmp_path, "learner") == tmp_path / "logs" / "learner.log"
    names = (
        rf.EVAL_SUMMARY,
        rf.EVAL_EPISODES,
        rf.LEARNER_METRICS,
        rf.LAUNCH_STATUS,
        rf.STEP_STAMP,
        rf.RESULTS,
    )
    assert names == (
        "eval_summary.json",
        "eval_episodes.jsonl",
        "learner_metrics.jsonl",
        "launch_status.json",
        ".robotrl_step.json",
        "results.json",
    )


def test_eval_summary_round_trip_and_episodes_ran(tmp_path: Path):
    assert rf.eval_episodes_ran(tmp_path) is None
    summary = {"episodes": 3, "success_rate": 2 / 3, "ci95": [0.2, 0.9], "mean_time_to_success_s": None}
    rf.write_eval_summary(tmp_path / "run", summary)
    assert rf.read_eval_summary(tmp_path / "run") == summary
    assert rf.eval_episodes_ran(tmp_path / "run") == 3
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / rf.EVAL_SUMMARY).write_text('{"episodes": 3')
    assert rf.eval_episodes_ran(tmp_path / "torn") is None


def test_eval_episodes_round_trip_and_read_as_written_before(tmp_path: Path):
    records = [
        rf.EpisodeRecord(0, 100, True, "success", 21, 20, 1.0, 0, 0, [0, 1], None),
        rf.EpisodeRecord(1, 101, False, None, 40, None, 0.0, 3, 5, [1], "inference failed"),
    ]
    rf.write_eval_episodes(tmp_path, records)
    assert rf.read_eval_episodes(tmp_path) == records
    old = {
        "episode": 2, "seed": 7, "success": False, "outcome": "timeout", "ticks": 40, "success_tick": None,
        "reward": 0.0, "starved_ticks": 1, "intervention_ticks": 0, "policy_versions": [3], "failure": None,
    }  # fmt: skip
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "eval_episodes.jsonl").write_text(json.dumps(old) + "\n")
    (record,) = rf.read_eval_episodes(tmp_path / "old")
    assert record.to_json() == old


def test_actor_progress_round_trip_and_partial_files_take_defaults(tmp_path: Path):
    assert rf.read_actor_progress(tmp_path, "actor-0") is None
    progress = rf.ActorProgress(
        episodes=2, successes=1, ticks=80, policy_version=4, last_success=True, backlog=1, rows_sent=79,
        refused_rows=1, missed_deadlines=0, time=12.5, taken_over=1, history=[[0, 2], [1, 4]],
    )  # fmt: skip
    rf.write_actor_progress(tmp_path, "actor-0", progress)
    assert rf.read_actor_progress(tmp_path, "actor-0") == progress
    assert not list(tmp_path.glob("*.tmp"))  # replaced, nothing left beside
    (tmp_path / "actor_actor-1_progress.json").write_text(json.dumps({"history": [[1, 0]], "extra": 1}))
    old = rf.read_actor_progress(tmp_path, "actor-1")
    assert old is not None and old.episodes == 0 and old.policy_version == -1
    assert old.policy_successes() == [1] and old.versions() == [0]
    assert [p.episodes for p in rf.every_actor_progress(tmp_path)] == [2, 0]


def test_actor_summary_and_sent_record_round_trip(tmp_path: Path):
    summary = {"episodes": 1, "transport": {"sent_batches": 3, "flushed": True}}
    rf.write_actor_summary(tmp_path, "actor-0", summary)
    assert rf.read_actor_summary(tmp_path, "actor-0") == summary
    assert rf.read_sent_record(tmp_path, "actor-0") is None
    rf.write_sent_record(tmp_path, "actor-0", rf.SentRecord("actor-0/1a", rows=64, seq=3))
    assert rf.read_sent_record(tmp_path, "actor-0") == rf.SentRecord("actor-0/1a", 64, 3)
    (tmp_path / "actor_old_sent.json").write_text('{"stream": "s", "rows": 5, "seq": 0}')
    assert rf.read_sent_record(tmp_path, "old") == rf.SentRecord("s", 5, 0)


def test_learner_metrics_written_line_by_line_read_whole_and_last(tmp_path: Path):
    assert rf.read_learner_metrics(tmp_path) == [] and rf.last_learner_metrics(tmp_path) is None
    log = rf.JsonLinesLog(tmp_path / rf.LEARNER_METRICS)
    records = [{"group": 1, "q_loss": 0.5}, {"group": 2, "q_loss": 0.25}]
    for record in records:
        log.write(record)
    assert rf.last_learner_metrics(tmp_path) == records[-1]  # flushed line by line, read while open
    log.close()
    assert rf.read_learner_metrics(tmp_path) == records
    with (tmp_path / rf.LEARNER_METRICS).open("a") as f:
        f.write('{"group": 3, "q_lo')  # a line being written
    assert rf.last_learner_metrics(tmp_path) == records[-1]


def test_pretrain_metrics_and_replay_reports_round_trip(tmp_path: Path):
    rf.append_json_line(tmp_path / rf.PRETRAIN_METRICS, {"step": 1, "loss": 0.5})
    rf.append_json_line(tmp_path / rf.PRETRAIN_METRICS, {"step": 2, "loss": 0.4})
    assert [r["step"] for r in rf.read_json_lines(tmp_path / rf.PRETRAIN_METRICS)] == [1, 2]
    report = {"tolerance": 1e-4, "reproduced": 2, "episodes": [{"episode": 0}]}
    rf.write_json(tmp_path / "out" / rf.REPLAY_OPEN_LOOP, report, indent=1)
    assert rf.read_json_object(tmp_path / "out" / rf.REPLAY_OPEN_LOOP) == report


def test_launch_status_round_trip_and_rows_of_today(tmp_path: Path):
    assert rf.read_launch_status(tmp_path) is None
    rows = [
        rf.RoleStatus("learner", 10, "running", 0, 3.5, None, "logs/learner.log", {"group": 4}),
        rf.RoleStatus("actor-0", None, "failed", 2, None, 1, "logs/actor-0.log", {}),
    ]
    rf.write_launch_status(tmp_path, rows)
    status = rf.read_launch_status(tmp_path)
    assert status is not None and status.roles == rows and status.time > 0
    row = {"role": "actor-0", "pid": 5, "state": "done", "restarts": 0, "uptime_s": None, "last_exit": 0,
           "log": "x.log", "progress": {"episodes": 1}}  # fmt: skip
    (tmp_path / "launch_status.json").write_text(json.dumps({"time": 1.0, "roles": [row, "junk"]}))
    assert rf.read_launch_status(tmp_path) == rf.LaunchStatus(1.0, [rf.RoleStatus.from_json(row)])
    assert rf.RoleStatus.from_json(row).to_json() == row


def test_step_stamp_round_trip_and_an_incomplete_stamp_is_none(tmp_path: Path):
    stamp = rf.StepStamp(argv=["eval", "x=1"], inputs={"/a": "17f", "/b": None}, run="18a", seconds=2.5)
    rf.write_step_stamp(tmp_path, stamp)
    assert rf.read_step_stamp(tmp_path) == stamp
    (tmp_path / ".robotrl_step.json").write_text(json.dumps({"argv": ["eval"]}))
    assert rf.read_step_stamp(tmp_path) is None


def test_demo_and_sweep_results_round_trip(tmp_path: Path):
    results = {"success_before": 0.5, "success_after": 0.75, "ci95": {"before": [0.3, 0.7]}}
    rf.write_demo_results(tmp_path / "demo", results)
    assert rf.read_demo_results(tmp_path / "demo") == results
    row = {"latency": "constant:0.1", "strategy": "prefix", "success_rate": 1.0}
    sweep = rf.SweepResults(["ckpt"], [row], [{**row, "policy": 0}])
    rf.write_sweep_results(tmp_path / "sweep", sweep)
    assert rf.read_sweep_results(tmp_path / "sweep") == sweep
    assert json.loads((tmp_path / "sweep" / "results.json").read_text()) == {
        "policies": ["ckpt"],
        "rows": sweep.rows,
        "seed_rows": sweep.seed_rows,
    }


def test_latest_checkpoint_is_the_complete_one_the_pointer_names(tmp_path: Path):
    assert rf.latest_checkpoint(tmp_path) is None
    root = tmp_path / rf.CHECKPOINTS
    (root / "group-2").mkdir(parents=True)
    (root / rf.CHECKPOINT_LATEST).write_text("group-2\n")
    assert rf.latest_checkpoint(tmp_path) is None  # no counters: not complete
    (root / "group-2" / rf.CHECKPOINT_COUNTERS).write_text("{}")
    assert rf.latest_checkpoint(tmp_path) == root / "group-2"
