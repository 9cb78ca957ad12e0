"""The `robotrl` console script, run as a user runs it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from robotrl import cli
from robotrl.cli import EXIT_INTERRUPTED, EXIT_NOT_BUILT, EXIT_USAGE, ROLES_BY_NAME, Role, main

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


def test_bench_unknown_name_is_a_usage_error():
    out = run("bench", "nope")
    assert out.returncode == 2 and "invalid choice" in out.stderr
