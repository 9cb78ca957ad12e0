"""The `robotrl` console script, run as a user runs it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from robotrl import cli
from robotrl.cli import EXIT_INTERRUPTED, EXIT_NOT_BUILT, EXIT_USAGE, ROLES, ROLES_BY_NAME, Role, main
from robotrl.config.load import load_config
from robotrl.config.policy import PolicyKind
from robotrl.config.roles import runnable_kinds

ROBOTRL = shutil.which("robotrl") or str(Path(sys.executable).parent / "robotrl")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ROBOTRL, *args], capture_output=True, text=True, timeout=120, check=False)


def test_help_lists_every_role_of_the_design():
    out = run("--help")
    assert out.returncode == 0
    for role in ("actor", "learner", "launch", "pretrain", "record", "replay", "eval", "experiment", "bench"):
        assert f"  {role} " in out.stdout


def test_unbuilt_role_says_so_and_exits_nonzero(capsys, monkeypatch):
    # Every role of the design is built; a future one is announced the same way.
    future = Role("future", "a role still being built", None, issue=99)
    monkeypatch.setitem(ROLES_BY_NAME, "future", future)
    assert main(["future"]) == EXIT_NOT_BUILT
    err = capsys.readouterr().err
    assert "not built yet" in err and "issue 99" in err


def test_ctrl_c_before_a_role_handles_it_is_a_clean_interrupted_exit(capsys, monkeypatch):
    # `robotrl launch` may stop an actor that is still importing torch: no traceback, exit 130.
    def interrupted(_cfg: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_load_entry", lambda _entry: interrupted)
    assert main(["actor"]) == EXIT_INTERRUPTED
    assert "robotrl actor: interrupted" in capsys.readouterr().err


def test_bad_config_fails_at_start_naming_the_field():
    out = run("actor", "actor.margin_ticks=-2")
    assert out.returncode == EXIT_USAGE
    assert "actor.margin_ticks" in out.stderr


def test_unknown_role_suggests_the_closest(capsys):
    assert main(["lerner"]) == EXIT_USAGE
    assert "did you mean 'learner'" in capsys.readouterr().err


def test_role_help_documents_config_fields(capsys):
    assert main(["actor", "--help"]) == 0
    out = capsys.readouterr().out
    assert "strategy" in out and "Execution strategy" in out and "latency.median_s" in out


def test_config_role_prints_the_composed_config(capsys):
    assert main(["config", "actor.strategy=sync"]) == 0
    assert "strategy: sync" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["codec"])
def test_bench_quick_ends_with_one_json_line(name):
    out = run("bench", name, "--quick")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["bench"] == name
    assert result["image_mb_per_s"] > 0 and result["state_mb_per_s"] > 0 and result["ratio_vs_copy"] > 0
    assert result["ratio_vs_copy"] == min(result["state_ratio_vs_copy"], result["image_ratio_vs_copy"])


def test_bench_unknown_name_is_a_usage_error():
    out = run("bench", "nope")
    assert out.returncode == 2 and "invalid choice" in out.stderr


def test_bench_ranks_is_for_the_learner_alone():
    out = run("bench", "codec", "--ranks", "2")
    assert out.returncode == 2 and "--ranks applies to the learner benchmark only" in out.stderr


LEARNED = {PolicyKind.flow, PolicyKind.lerobot}
RUNNABLE = {
    "actor": LEARNED,
    "learner": LEARNED,
    "launch": LEARNED,
    "eval": LEARNED,
    "profile-latency": LEARNED,
    "pretrain": LEARNED,
    "record": {PolicyKind.expert},
    "replay": None,  # open_loop replays recorded actions; resim runs a policy (below)
    "experiment": {PolicyKind.flow},  # the demo pretrains the built-in policy
    "check-arm": None,
    "config": None,
}
"""The policy kinds each role of the CLI can run with the default config; None: it runs none."""
PRESET = {PolicyKind.flow: ["policy=flow_tiny"], PolicyKind.lerobot: ["policy=lerobot", "policy.path=/x"]}


def test_every_role_on_the_shared_config_declares_the_policies_it_runs():
    cfg = load_config()
    for role in ROLES:
        if role.uses_config or role.name == "launch":
            kinds = runnable_kinds(role.name, cfg)
            assert (None if kinds is None else set(kinds)) == RUNNABLE[role.name], role.name
    assert set(runnable_kinds("replay", load_config(["replay.mode=resim"])) or ()) == LEARNED
    assert set(runnable_kinds("experiment", load_config(["experiment=latency_sweep"])) or ()) == LEARNED


def _refusals() -> list[tuple[list[str], PolicyKind]]:
    out = [
        ([role], kind)
        for role, kinds in RUNNABLE.items()
        if kinds is not None
        for kind in PolicyKind
        if kind not in kinds
    ]
    out += [(["replay", "replay.mode=resim"], PolicyKind.expert)]
    out += [(["experiment", "experiment=latency_sweep"], PolicyKind.expert)]
    return out


@pytest.mark.parametrize(
    ("args", "kind"), _refusals(), ids=lambda v: v.value if isinstance(v, PolicyKind) else " ".join(v)
)
def test_a_role_given_a_policy_it_cannot_run_is_a_config_error(args, kind, capsys):
    assert main([*args, *PRESET.get(kind, [f"policy={kind.value}"])]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"policy.kind: `robotrl {args[0]}` cannot run the {kind.value} policy" in err


def test_eval_of_the_scripted_expert_exits_2_naming_the_field_not_a_traceback():
    # This interpreter's module, not the console script: the script may belong to another checkout.
    out = subprocess.run(
        [sys.executable, "-m", "robotrl.cli", "eval", "policy=expert"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == EXIT_USAGE
    assert "policy.kind" in out.stderr and "cannot run the expert policy" in out.stderr
    assert "Traceback" not in out.stderr


def test_an_old_field_name_is_a_usage_error_naming_the_new_one(capsys):
    assert main(["config", "learner.weight_ess=0.6"]) == EXIT_USAGE
    assert "learner.weight_ess: was renamed learner.rapi.weight_ess" in capsys.readouterr().err
