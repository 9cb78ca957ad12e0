"""The entry page stays an entry page and presets stay presets: results live in docs/results.md."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRESETS = sorted((ROOT / "configs").rglob("*.yaml"))


def test_readme_is_short_and_names_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.split()) <= 850  # the run-by-run history belongs in docs/results.md
    assert "make demo" in text
    assert "make test" in text


def comment_runs(text: str) -> list[tuple[int, int]]:
    """(first line, length) of every run of consecutive comment lines; Hydra's ``# @package``
    directive is not a comment."""
    runs: list[tuple[int, int]] = []
    start, length = 0, 0
    for number, line in enumerate([*text.splitlines(), ""], start=1):
        stripped = line.strip()
        if stripped.startswith("#") and not stripped.startswith("# @package"):
            start, length = (start, length + 1) if length else (number, 1)
            continue
        if length:
            runs.append((start, length))
        length = 0
    return runs


def test_comment_runs():
    assert comment_runs("# @package _global_\n# one\na: 1\n  # two\n  # three\nb: 2  # four\n") == [
        (2, 1),
        (4, 2),
    ]


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: str(p.relative_to(ROOT)))
def test_preset_comments_are_one_line_each(preset):
    """A preset holds values; each may carry one line saying why. Measurements go to docs/results.md."""
    runs = comment_runs(preset.read_text())
    long = [f"line {start}: {length} comment lines" for start, length in runs if length > 1]
    assert long == []
