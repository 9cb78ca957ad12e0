"""`robotrl replay`: a recorded sim episode reproduces open loop; to_learner fills the anchor."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from robotrl.sim.record import record
from waiting import wait_until

from robotrl.config.load import load_config
from robotrl.replay.main import main as replay

STATE_ONLY = ["env=so101_pick_place", "env.cameras=[]", "env.privileged_state=true", "policy=flow_tiny"]


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("replay") / "demos"
    cfg = load_config(
        [*STATE_ONLY, "policy=expert", "record.episodes=2", f"record.output_dir={out}", "seed=7"]
    )
    assert record(cfg) == 0
    return out


def _frames(path: Path) -> int:
    return int(json.loads((path / "meta" / "info.json").read_text())["total_frames"])


def test_open_loop_replay_reproduces_the_recorded_states(demos: Path, tmp_path: Path):
    cfg = load_config([*STATE_ONLY, f"dataset={demos}", "replay.seed=7", f"run_dir={tmp_path}"])
    assert replay(cfg) == 0
    report = json.loads((tmp_path / "replay_open_loop.json").read_text())
    assert report["reproduced"] == 2
    for ep in report["episodes"]:
        assert ep["compared"] == ep["frames"] and ep["max_state_error"] <= 1e-4
        assert ep["recorded_success"] == ep["replayed_success"]


def test_open_loop_replay_from_the_wrong_seed_is_reported_as_drift(demos: Path, tmp_path: Path):
    cfg = load_config([*STATE_ONLY, f"dataset={demos}", "replay.seed=8", f"run_dir={tmp_path}"])
    assert replay(cfg) == 1
    report = json.loads((tmp_path / "replay_open_loop.json").read_text())
    assert report["episodes"][0]["first_drift_tick"] == 0  # the reset itself differs


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_to_learner_fills_the_anchor_buffer_with_every_recorded_frame(demos: Path, tmp_path: Path):
    link = [
        f"transport.transitions_endpoint=ipc://{tmp_path}/t.sock",
        f"transport.weights_endpoint=ipc://{tmp_path}/w.sock",
        f"transport.spool_dir={tmp_path}/spool",
    ]
    learner = subprocess.Popen(
        [
            sys.executable, "-m", "robotrl.cli", "learner", *STATE_ONLY, *link, f"run_dir={tmp_path}/learner",
            "learner.learning_starts=1", "learner.batch_size=16", "learner.log_every_groups=1",
            "learner.rapi.critic_warmup_updates=1000",
        ],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        cfg = load_config(
            [*STATE_ONLY, *link, f"dataset={demos}", "replay.mode=to_learner", f"run_dir={tmp_path}"]
        )
        assert replay(cfg) == 0
        sent = json.loads((tmp_path / "replay_to_learner.json").read_text())
        assert sent["episodes"] == 2 and sent["frames"] == _frames(demos) and sent["delivered"]
        metrics = tmp_path / "learner" / "learner_metrics.jsonl"

        def latest() -> dict:
            lines = metrics.read_text().splitlines() if metrics.exists() else []
            return json.loads(lines[-1]) if lines else {}

        def learner_alive() -> None:
            assert learner.poll() is None, learner.communicate()[0][-3000:]

        wait_until(lambda: latest().get("segments", 0) >= 2, 120, "two anchor segments", 0.2, learner_alive)
        last = latest()
        assert last.get("segments") == 2, last
        assert last["transitions"] == _frames(demos)
        # Each episode is one whole intervention segment in the anchor: every frame, nothing else.
        assert last["interventions_rows_added"] == _frames(demos), last
    finally:
        learner.send_signal(signal.SIGINT)
        learner.communicate(timeout=60)
