"""robotrl's child processes keep the datasets library quiet, warning included."""

from __future__ import annotations

import os
import subprocess
import sys

from robotrl.core.quiet import quiet_variables

_LEROBOT_SUPPRESSES_BARS = (
    "from lerobot.utils.utils import SuppressProgressBars\n"
    "with SuppressProgressBars():\n"
    "    pass\n"
    "from datasets.utils.tqdm import are_progress_bars_disabled\n"
    "print(are_progress_bars_disabled())\n"
)


def test_a_quiet_child_has_no_bars_and_no_warning_after_lerobot_turns_them_back_on():
    env = {**os.environ, **quiet_variables({})}
    done = subprocess.run(
        [sys.executable, "-c", _LEROBOT_SUPPRESSES_BARS], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"  # the bars stay off
    assert "Cannot enable progress bars" not in done.stderr


def test_a_users_warning_filters_are_kept_and_ours_is_added_once_however_deep_the_children_nest():
    child = quiet_variables({"PYTHONWARNINGS": "error"})
    assert child["PYTHONWARNINGS"].startswith("error,ignore:Cannot enable progress bars")
    assert quiet_variables(child) == child
    assert quiet_variables({})["PYTHONWARNINGS"].startswith("ignore:")
