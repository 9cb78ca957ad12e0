"""Experiment steps: configs travel to child processes as overrides, and finished steps are cached."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from demo_steps import offline_step_argvs
from rich.console import Console

from robotrl.actor.report import pool_summaries, wilson_interval
from robotrl.config.experiment import demo_seed_problems
from robotrl.config.latency import parse_latency
from robotrl.config.learner import AlgorithmKind
from robotrl.config.load import ConfigError, load_config
from robotrl.core.run_folder import STEP_STAMP
from robotrl.experiment.demo import Demo
from robotrl.experiment.main import main as experiment_main
from robotrl.experiment.parallel import Job, JobDone
from robotrl.experiment.steps import (
    Steps,
    config_overrides,
    hydra_value,
    ran_every_episode,
    run_id,
    step_key,
    write_stamp,
)
from robotrl.experiment.sweep import difference_interval, findings

GROUPS = ("env", "policy", "actor", "learner", "transport")


def test_overrides_reproduce_every_field_of_the_groups_including_odd_strings_and_nulls():
    cfg = load_config(["env=so101_pick_place", "policy=flow_tiny", "learner=bc", "experiment=demo"])
    cfg.transport.spool_dir = "/tmp/a b/it's=here"
    cfg.learner.demos_path = None
    cfg.policy.path = "runs/x:y/policy"
    again = load_config(config_overrides(cfg, GROUPS))
    for group in GROUPS:
        assert getattr(again, group) == getattr(cfg, group), group


def test_the_continued_imitation_baseline_clones_the_demonstrations_alone(tmp_path: Path):
    cfg = load_config(["experiment=demo", f"experiment.output_dir={tmp_path}"])
    demo = Demo(cfg, Console(file=open("/dev/null", "w")))  # noqa: SIM115
    rapi, bc, demos_only = (demo.finetune_config(name).learner for name in ("rapi", "bc", "bc_demos"))
    assert rapi.algorithm is AlgorithmKind.rapi
    assert bc.algorithm is demos_only.algorithm is AlgorithmKind.bc
    # bc reads what RAPI reads (online half, anchor with the fastest successes); bc_demos only the demos
    assert (bc.anchor_fraction, bc.fastest_successes) == (rapi.anchor_fraction, rapi.fastest_successes)
    assert rapi.anchor_fraction < 1 and rapi.fastest_successes > 0
    assert (demos_only.anchor_fraction, demos_only.fastest_successes) == (1.0, 0)
    assert rapi.demos_path == bc.demos_path == demos_only.demos_path == str(tmp_path / "demos")


def test_the_recording_step_gets_every_record_option(tmp_path: Path, monkeypatch):
    cfg = load_config(["experiment=demo", f"experiment.output_dir={tmp_path}", "record.miss_rate=0.3"])
    demo = Demo(cfg, Console(file=open("/dev/null", "w")))  # noqa: SIM115
    record = load_config(offline_step_argvs(demo, tmp_path, monkeypatch)[0][4:]).record
    assert record.miss_rate == 0.3 and record.overwrite
    assert (record.episodes, record.output_dir) == (cfg.experiment.demos, str(tmp_path / "demos"))


def test_a_scripted_takeover_helps_only_while_fine_tuning(tmp_path: Path, monkeypatch):
    takeovers = [
        "env.takeover.ticks=120",
        "env.takeover.on_miss=true",
        "env.takeover.miss_wait_ticks=30",
        "env.takeover.before_miss=true",
        "env.takeover.reopen_only=true",
        "env.takeover.max_corrections=3",
    ]
    cfg = load_config(["experiment=demo", f"experiment.output_dir={tmp_path}", *takeovers])
    demo = Demo(cfg, Console(file=open("/dev/null", "w")))  # noqa: SIM115
    env = demo.finetune_config("rapi").env
    assert (env.takeover.ticks, env.takeover.on_miss, env.takeover.before_miss) == (
        120,
        True,
        True,
    )
    assert env.takeover.reopen_only and env.takeover.max_corrections == 3
    for argv in offline_step_argvs(demo, tmp_path, monkeypatch):
        assert "env.takeover.ticks=0" in argv and "env.takeover.on_miss=false" in argv
        assert "env.takeover.before_miss=false" in argv
        assert "env.takeover.miss_wait_ticks=0" in argv
        assert "env.takeover.reopen_only=false" in argv
        assert "env.takeover.max_corrections=1" in argv


def test_evaluations_sample_at_the_evaluation_temperature_while_fine_tuning_explores(
    tmp_path: Path, monkeypatch
):
    cfg = load_config(
        [
            "experiment=demo",
            f"experiment.output_dir={tmp_path}",
            "experiment.eval_noise_scale=0",
            "policy.noise_scale=1",
        ]
    )
    demo = Demo(cfg, Console(file=open("/dev/null", "w")))  # noqa: SIM115
    assert demo.finetune_config("rapi").policy.noise_scale == 1.0
    record, pretrain, evaluate = offline_step_argvs(demo, tmp_path, monkeypatch)
    assert "policy.noise_scale=0.0" in evaluate
    assert "policy.noise_scale=1.0" in pretrain and "policy.kind='expert'" in record


def _summary(episodes: int, successes: int, tts: float, jerk: float, failed: str) -> dict[str, object]:
    lo, hi = wilson_interval(successes, episodes)
    return {
        "episodes": episodes,
        "success_rate": successes / episodes,
        "ci95": [round(lo, 4), round(hi, 4)],
        "mean_time_to_success_s": tts,
        "jerk_rms": jerk,
        "starved_ticks": 3,
        "outcomes": {"success": successes, failed: episodes - successes},
    }


def test_pooled_runs_count_every_episode_and_keep_each_runs_rate():
    pooled = pool_summaries(
        [_summary(200, 150, 2.0, 10.0, "cube never moved"), _summary(200, 170, 3.0, 20.0, "x")]
    )
    assert (pooled["episodes"], pooled["success_rate"], pooled["runs"]) == (400, 0.8, [0.75, 0.85])
    assert pooled["ci95"] == [round(b, 4) for b in wilson_interval(320, 400)]
    assert pooled["mean_time_to_success_s"] == pytest.approx((150 * 2.0 + 170 * 3.0) / 320)  # per success
    assert (pooled["jerk_rms"], pooled["starved_ticks"]) == (15.0, 6)
    assert pooled["outcomes"] == {"success": 320, "cube never moved": 50, "x": 30}
    one = _summary(50, 31, 2.5, 7.0, "x")
    alone = pool_summaries([one])
    assert {k: alone[k] for k in one} == one and alone["runs"] == [0.62]
    with pytest.raises(ValueError):
        pool_summaries([])


@pytest.mark.parametrize("workers", [1, 2])
def test_repeated_fine_tuning_runs_have_their_own_seeds_and_are_pooled(tmp_path: Path, monkeypatch, workers):
    cfg = load_config(
        [
            "experiment=demo",
            f"experiment.output_dir={tmp_path}",
            "experiment.repeats=2",
            "experiment.algorithms=[rapi,bc]",
            "experiment.eval_episodes=10",
            "experiment.rerun_episodes=0",
            f"experiment.finetune_workers={workers}",  # one by one, or side by side in the background
        ]
    )
    printed = io.StringIO()
    demo = Demo(cfg, Console(file=printed, width=200))
    launched: dict[str, list[str]] = {}
    wins = {"best_offline": 5, "offline_control": 7, "rapi": 6, "bc": 4, "rapi-run2": 10, "bc-run2": 6}

    def fake_step(title: str, out: Path, argv: list[str], inputs: object = ()) -> None:
        load_config(argv[4:])  # the step's own process accepts its command line
        out.mkdir(parents=True, exist_ok=True)
        if argv[3] in ("launch", "learner"):
            launched[out.name] = argv
            (out / "policy").mkdir()
        elif argv[3] == "eval":
            won = wins[out.name.removeprefix("eval_")]
            (out / "eval_summary.json").write_text(json.dumps(_summary(10, won, 2.0, 1.0, "x")))

    batches: list[list[str]] = []  # the role of each job that went through run_parallel, by call

    def fake_parallel(jobs: Sequence[Job], max_workers: int, on_done: Callable[[JobDone], None]) -> None:
        assert max_workers == workers
        batches.append([job.argv[3] for job in jobs])
        for job in jobs:
            fake_step(job.title, job.out_dir, list(job.argv))
            on_done(JobDone(job, False, 1.0))

    monkeypatch.setattr(demo.steps, "run", fake_step)
    monkeypatch.setattr("robotrl.experiment.demo.run_parallel", fake_parallel)
    assert demo.run() == 0
    runs = ["finetune_rapi", "finetune_bc", "finetune_rapi-run2", "finetune_bc-run2"]
    assert [name for name in launched if name != "finetune_offline_control"] == runs
    assert "finetune_offline_control" in launched
    # side by side, every fine-tune and then the control, then every evaluation; one by one,
    # nothing in the background
    assert batches == ([["launch"] * 4 + ["learner"], ["eval"] * 5] if workers > 1 else [])
    stride = cfg.launch.actor_seed_stride
    assert "seed=0" in launched["finetune_rapi"] and "actor.seed=0" in launched["finetune_rapi"]
    assert (
        "seed=1" in launched["finetune_rapi-run2"]
        and f"actor.seed={stride}" in launched["finetune_rapi-run2"]
    )
    assert (
        launched["finetune_bc-run2"].count(f"actor.seed={stride}") == 1
    )  # the same episodes as rapi's run 2
    results = json.loads((tmp_path / "results.json").read_text())
    assert (results["repeats"], results["episodes"]) == (2, 10)
    assert results["sim_steps_per_s"]["env"] > 0 and results["sim_steps_per_s"]["cameras"] == []
    success = results["success"]
    assert (success["best_offline"], success["offline_control"], success["rapi"], success["bc"]) == (
        0.5,
        0.7,
        0.8,
        0.5,
    )
    assert results["per_policy"]["rapi"]["runs"] == [0.6, 1.0]
    assert results["per_policy"]["bc"]["episodes"] == 20
    assert results["ci95"]["rapi"] == [round(b, 4) for b in wilson_interval(16, 20)]
    assert results["rapi_beats_beyond_ci"] == {"best_offline": False, "offline_control": False, "bc": False}
    updates = cfg.experiment.update_groups * cfg.learner.actor_updates_per_group
    assert results["offline_control_updates"] == updates
    assert results["actor_updates"] == {  # the stubbed learners logged nothing
        "offline_control": [None],
        "rapi": [None, None],
        "bc": [None, None],
    }
    # 3 starved ticks in each run's 10 episodes: the pooled rows (20 episodes) read as the unpooled ones
    assert "starved ticks / episode" in printed.getvalue() and printed.getvalue().count(" 0.30 ") == 4
    assert "+ online RAPI (of 20): 4 x" in printed.getvalue()


def test_the_online_seeds_of_every_run_stay_clear_of_the_evaluation_seeds(tmp_path: Path, capsys):
    assert not demo_seed_problems(load_config(["experiment=demo", "experiment.repeats=3"]))
    # three runs of one actor fine-tune on seeds 0-299, 100000-100299 and 200000-200299
    clash = load_config(
        [
            "experiment=demo",
            f"experiment.output_dir={tmp_path}",
            "experiment.repeats=3",
            "experiment.eval_seed=200100",
        ]
    )
    assert experiment_main(clash) == 2 and not list(tmp_path.iterdir())  # refused before any step ran
    assert "evaluation seeds 200100-200299 overlap the fine-tuning runs' online seeds 0-200299" in (
        capsys.readouterr().err
    )
    validation = load_config(["experiment=demo", "experiment.validation_seed=1000150"])
    assert demo_seed_problems(validation) == [
        (
            "experiment.validation_seed",
            "the validation seeds 1000150-1000199 overlap the final evaluation seeds 1000000-1000199: "
            "move experiment.validation_seed past them",
        )
    ]
    # an evaluation step's own process carries actor.seed = the evaluation seed: not a clash
    assert load_config(["experiment=demo", "actor.seed=1000000"]).actor.seed == 1_000_000
    with pytest.raises(ConfigError, match=r"experiment\.repeats"):
        load_config(["experiment.repeats=0"])


def test_hydra_values_keep_their_types():
    assert hydra_value(None) == "null"
    assert hydra_value(True) == "true"
    assert hydra_value([1, "a"]) == "[1,'a']"
    assert hydra_value("null") == "'null'"  # a string, not None


def test_a_step_with_a_matching_stamp_is_not_run_again(tmp_path: Path):
    out = tmp_path / "step"
    marker = tmp_path / "runs.txt"
    argv = [sys.executable, "-c", f"open({str(marker)!r}, 'a').write('x')"]
    steps = Steps(3, Console(file=open("/dev/null", "w")))  # noqa: SIM115
    assert not steps.run("first", out, argv).cached
    assert steps.run("again", out, argv).cached
    assert not steps.run("changed", out, [*argv[:2], argv[2] + "# changed"]).cached
    assert marker.read_text() == "xx"
    assert list(steps.seconds) == ["first", "changed"] and steps.cached == ["again"]


def test_a_step_runs_again_when_a_step_it_reads_from_ran_again(tmp_path: Path):
    # A longer pretraining writes into the same folder: its evaluation must not stay cached.
    marker = tmp_path / "runs.txt"
    steps = Steps(6, Console(file=open("/dev/null", "w")))  # noqa: SIM115

    def step(name: str, code: str = "") -> list[str]:
        return [sys.executable, "-c", f"open({str(marker)!r}, 'a').write({name!r}){code}"]

    upstream, downstream = tmp_path / "pretrain", tmp_path / "eval"
    steps.run("pretrain", upstream, step("p"))
    steps.run("eval", downstream, step("e"), inputs=[upstream])
    assert steps.run("eval again", downstream, step("e"), inputs=[upstream]).cached
    steps.run("pretrain longer", upstream, step("p", "# more steps"))
    assert not steps.run("eval of the new policy", downstream, step("e"), inputs=[upstream]).cached
    assert marker.read_text() == "pepe"


def test_pretraining_resumes_only_a_run_of_the_same_demonstrations_and_settings(tmp_path: Path, monkeypatch):
    cfg = load_config(["experiment=demo", f"experiment.output_dir={tmp_path}"])
    demo = Demo(cfg, Console(file=open("/dev/null", "w")))  # noqa: SIM115
    commands: list[list[str]] = []
    resumable: list[bool] = []

    def fake_step(title: str, out: Path, argv: list[str], inputs: Sequence[Path] = ()) -> None:
        commands.append(argv)
        resumable.append((out / "pretrain_state").exists())  # a real step resumes from it
        write_stamp(out, step_key(argv, {str(p): run_id(p) for p in inputs}), 1.0)
        (out / "pretrain_state").mkdir(exist_ok=True)

    def pretrain_leaves_a_checkpoint() -> bool:
        """Pretrain; whether the checkpoint of the run before was still there for it to resume."""
        demo.pretrain()
        return resumable[-1]

    monkeypatch.setattr(demo.steps, "run", fake_step)
    write_stamp(demo.demos, step_key(["record"], {}), 1.0)
    assert not pretrain_leaves_a_checkpoint()
    demo.ex.pretrain_steps += 2000  # pretraining longer continues the run
    assert pretrain_leaves_a_checkpoint()
    write_stamp(demo.demos, step_key(["record", "record.miss_rate=0.3"], {}), 1.0)  # new demonstrations
    assert not pretrain_leaves_a_checkpoint()
    demo.cfg.pretrain.lr *= 2  # another setting
    assert not pretrain_leaves_a_checkpoint()
    interrupted = commands[-1]
    (tmp_path / "pretrain" / STEP_STAMP).unlink()  # a run stopped before its stamp resumes
    assert pretrain_leaves_a_checkpoint() and commands[-1] == interrupted


def test_latency_specs_parse():
    kind, median = parse_latency("lognormal:0.15")
    assert (kind.value, median) == ("lognormal", 0.15)


@pytest.mark.parametrize("bad", ["lognormal", "warp:0.1", "lognormal:0", "empirical:0.1"])
def test_bad_latency_specs_name_themselves(bad: str):
    with pytest.raises(ValueError, match=bad.split(":")[0]):
        parse_latency(bad)


def _sweep_row(
    latency: str, strategy: str, rate: float, ci95: list[float], jerk: float, seconds: float | None = None
) -> dict[str, object]:
    """One row of a sweep's results, as findings() reads it."""
    return {
        "latency": latency,
        "strategy": strategy,
        "success_rate": rate,
        "ci95": ci95,
        "jerk_rms": jerk,
        "mean_time_to_success_s": seconds,
    }


def test_sweep_findings_compare_prefix_with_sync_and_naive_async_by_interval():
    rows = [
        _sweep_row("constant:0.4", "sync", 0.8, [0.7, 0.87], 5, 4.0),
        _sweep_row("constant:0.4", "prefix", 0.9, [0.8, 0.95], 10, 3.0),
        _sweep_row("constant:0.4", "naive_async", 0.3, [0.2, 0.45], 30),
        _sweep_row("constant:0", "sync", 0.8, [0.7, 0.87], 10, 2.0),
        _sweep_row("constant:0", "prefix", 0.5, [0.3, 0.7], 10),
        _sweep_row("constant:0", "naive_async", 0.6, [0.4, 0.8], 10),
    ]
    out = findings(rows)
    assert out[0].startswith("constant:0.4: prefix 90%, against sync 80%: +10 points")
    assert "kept), time to success 3.00 s vs 4.00 s" in out[0]
    assert "better than naive_async 30% (+60 points" in out[0]
    assert "LOST), time to success - vs 2.00 s" in out[1] and "not distinguishable from" in out[1]
    assert out[2] == (
        "prefix over 2 latencies: short of sync at constant:0; better than naive_async at constant:0.4,"
        " worse at none"
    )


def test_sweep_findings_call_a_difference_whose_interval_excludes_zero_even_where_intervals_overlap():
    # 78/100 versus 60/100: the two Wilson intervals overlap, the difference's does not.
    rows = [
        _sweep_row("constant:0.6", s, k / 100, list(wilson_interval(k, 100)), 1)
        for s, k in (("prefix", 78), ("naive_async", 60))
    ]
    assert "prefix 78%, better than naive_async 60%" in findings(rows)[0]
    rows.reverse()
    rows[0]["strategy"], rows[1]["strategy"] = "prefix", "naive_async"
    assert "prefix 60%, WORSE than naive_async 78%" in findings(rows)[0]


def test_difference_interval_matches_newcombes_worked_example():
    # Newcombe (1998), method 10: 56/70 versus 48/80 gives 0.0524 to 0.3339.
    lo, hi = difference_interval(56 / 70, wilson_interval(56, 70), 48 / 80, wilson_interval(48, 80))
    assert lo == pytest.approx(0.0524, abs=5e-4) and hi == pytest.approx(0.3339, abs=5e-4)
    # Overlapping intervals can still differ: 78/100 versus 60/100.
    lo, _ = difference_interval(0.78, wilson_interval(78, 100), 0.6, wilson_interval(60, 100))
    assert wilson_interval(78, 100)[0] < wilson_interval(60, 100)[1] and lo > 0


def test_a_sweep_cell_counts_as_done_only_with_every_episode(tmp_path: Path):
    assert not ran_every_episode(tmp_path, 10)  # no summary yet
    (tmp_path / "eval_summary.json").write_text(json.dumps({"episodes": 3}))
    assert not ran_every_episode(tmp_path, 10)  # stopped early by Ctrl-C
    (tmp_path / "eval_summary.json").write_text(json.dumps({"episodes": 10}))
    assert ran_every_episode(tmp_path, 10)


def test_the_vla_demo_makes_its_vla_offline_and_pretrains_from_that_folder(tmp_path: Path, monkeypatch):
    cfg = load_config(["experiment=vla_demo", f"experiment.output_dir={tmp_path}"])
    demo = Demo(cfg, Console(file=io.StringIO()))
    ran: list[list[str]] = []
    monkeypatch.setattr(demo.steps, "run", lambda title, out, argv, inputs=(): ran.append(list(argv)))
    demo.make_vla()
    demo.pretrain()
    made, pretrain = ran
    assert (
        made[3:7] == ["vla", "init", "--type=smolvla", "--size=tiny"] and f"--out={tmp_path / 'vla'}" in made
    )
    assert "env.cameras=['front','wrist']" in made and "env.privileged_state=false" in made
    pretrained = load_config(pretrain[4:])
    assert pretrained.policy.path == str(tmp_path / "vla") and pretrained.policy.kind.value == "lerobot"
    assert not pretrained.env.privileged_state and pretrained.env.cameras == ["front", "wrist"]


def test_a_vla_demo_needs_the_lerobot_adapter_and_cameras(tmp_path: Path, capsys):
    flow = load_config(["experiment=demo", "experiment.vla=smolvla", "env.cameras=[]"])
    flow.experiment.output_dir = str(tmp_path)
    assert experiment_main(flow) == 2 and not list(tmp_path.iterdir())  # refused before any step ran
    err = capsys.readouterr().err
    assert "policy.kind" in err and "env.cameras" in err
