"""Learner metrics reach the JSON-lines file and, when enabled, a rerun recording."""

from __future__ import annotations

import json

from robotrl.learner.metrics import MetricsLog


def test_metrics_go_to_json_lines_console_and_a_rerun_recording(tmp_path, capsys):
    log = MetricsLog(tmp_path / "m.jsonl", console=True, rerun_path=tmp_path / "m.rrd")
    log.write({"group": 1, "q_loss": 0.5, "policy_version": 2})
    log.write({"group": 2, "q_loss": 0.25, "policy_version": 3})
    log.close()
    lines = [json.loads(x) for x in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [(x["group"], x["q_loss"]) for x in lines] == [(1, 0.5), (2, 0.25)]
    assert "q_loss=0.25" in capsys.readouterr().out
    assert (tmp_path / "m.rrd").stat().st_size > 0
