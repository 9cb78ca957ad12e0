"""The demo's offline steps' command lines, captured without running them (shared by tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from robotrl.experiment.demo import Demo


def offline_step_argvs(demo: Demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The command lines of the record, pretrain and first evaluation steps (not run)."""
    ran: list[list[str]] = []
    monkeypatch.setattr(demo.steps, "run", lambda title, out, argv, inputs=(): ran.append(list(argv)))
    demo.record()
    demo.pretrain()
    with pytest.raises(FileNotFoundError):  # the stubbed step wrote no summary
        demo.evaluate("pretrained", demo.pretrained, "the pretrained policy", made_by=tmp_path)
    assert len(ran) == 3
    return ran
