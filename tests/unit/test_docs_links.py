"""Every relative link and file mention in the docs, code comments and configs names a file that exists.

What counts as a mention (the rule keeps output paths such as ``runs/demo/results.json`` out):

- a Markdown link ``[text](target)`` in any ``*.md``, unless it is a URL or an anchor; the
  target resolves against the linking file's folder;
- a path whose first folder is one of :data:`SOURCE_FOLDERS` and whose name ends in one of
  :data:`FILE_SUFFIXES`, anywhere in a ``*.md``, in a Python comment or docstring, in a comment
  of a preset (``configs/**/*.yaml``), a shell script, the Makefile or pyproject.toml; it
  resolves against the repository root. A pattern (``tests/unit/test_*.py``) is not a mention.
"""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SOURCE_FOLDERS = ("robotrl", "sim", "hardware", "configs", "launch", "tests", "docs", ".ci")
"""Top folders of the repository's own files: a path starting with one of them is a mention."""
FILE_SUFFIXES = ("py", "md", "yaml", "sh", "toml", "json", "txt")
SKIPPED_FOLDERS = {".git", ".venv", "build", "dist", "runs", "outputs", "multirun", "logs", "__pycache__"}
"""Generated or local folders (the .gitignore's), never walked."""

_FOLDERS = "|".join(re.escape(f) for f in SOURCE_FOLDERS)
MENTION = re.compile(rf"(?<![\w./<>*$-])((?:{_FOLDERS})/[\w./-]*\.(?:{'|'.join(FILE_SUFFIXES)}))(?![\w*<>-])")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def project_files(suffix: str) -> list[Path]:
    """The repository's files ending in ``suffix``, generated and local folders left out."""
    found = []
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [d for d in subfolders if d not in SKIPPED_FOLDERS and not d.endswith(".egg-info")]
        found += [Path(folder) / f for f in files if f.endswith(suffix)]
    return sorted(found)


def python_prose(source: str) -> Iterator[str]:
    """The comments and docstrings of a Python module: where it talks about other files."""
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield doc


def hash_comments(text: str) -> Iterator[str]:
    """What follows ``#`` on each line (YAML, shell, Makefile, TOML comments)."""
    for line in text.splitlines():
        at = line.find("#")
        if at >= 0:
            yield line[at:]


def prose_by_file() -> Iterator[tuple[Path, str]]:
    """(file, a piece of its prose) for every place the rule reads."""
    for path in project_files(".md"):
        yield path, path.read_text()
    for path in project_files(".py"):
        for piece in python_prose(path.read_text()):
            yield path, piece
    commented = [*project_files(".yaml"), *project_files(".sh"), ROOT / "Makefile", ROOT / "pyproject.toml"]
    for path in [*commented, ROOT / ".ci" / "run"]:
        for piece in hash_comments(path.read_text()):
            yield path, piece


def mentions(text: str) -> list[str]:
    return [m.rstrip(".") for m in MENTION.findall(text)]


def test_source_folders_exist():
    assert [f for f in SOURCE_FOLDERS if not (ROOT / f).is_dir()] == []


def test_mention_rule():
    text = (
        "see `robotrl/actor/loop.py` and docs/architecture.md. Not runs/demo/results.json,"
        " not tests/unit/test_*.py, not <run_dir>/sim/x.py, not robotrl/SO101Reach-v0."
    )
    assert mentions(text) == ["robotrl/actor/loop.py", "docs/architecture.md"]


@pytest.mark.parametrize("name", ["README.md", "docs/architecture.md", "docs/methods.md"])
def test_the_entry_pages_exist(name):
    assert (ROOT / name).is_file()


def test_every_file_mention_resolves():
    missing = sorted(
        {
            f"{path.relative_to(ROOT)}: {mention}"
            for path, text in prose_by_file()
            for mention in mentions(text)
            if not (ROOT / mention).exists()
        }
    )
    assert missing == []


def test_every_relative_markdown_link_resolves():
    missing = []
    for path in project_files(".md"):
        for target in LINK.findall(path.read_text()):
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL, mailto: or an anchor in the same page
            if not (path.parent / target.split("#")[0]).exists():
                missing.append(f"{path.relative_to(ROOT)}: {target}")
    assert missing == []


def test_nothing_cites_the_design_notes_outside_the_repository():
    """The starting design and method notes were never in the repository: docs/architecture.md
    and docs/methods.md hold what they said."""
    gone = ("DESIGN" + ".md", "REFERENCE" + ".md")
    me = Path(__file__).resolve()
    citing = sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for suffix in (".md", ".py", ".yaml", ".sh", ".toml")
        for path in project_files(suffix)
        if path != me
        for name in gone
        if name in path.read_text()
    )
    assert citing == []
