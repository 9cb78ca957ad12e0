"""Packaging: the layout maps into the robotrl namespace, in editable and normal installs."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
CONFIGS = ROOT / "configs"


def discovered_packages() -> set[str]:
    """Every folder with an __init__.py, and every config group folder (YAML presets, no code:
    a namespace package to Python), named as it imports through package-dir."""
    found = set()
    for package, folder in SETUPTOOLS["package-dir"].items():
        base = ROOT / folder
        for marker in [*base.rglob("__init__.py"), *base.rglob("*.yaml")]:
            rel = marker.parent.relative_to(base)
            found.add(".".join([package, *rel.parts]))
    return found


def presets() -> set[str]:
    """Every preset in configs/, named as it lies in an installed robotrl."""
    return {"robotrl/configs/" + p.relative_to(ROOT / "configs").as_posix() for p in CONFIGS.rglob("*.yaml")}


def build_wheel(out: Path) -> tuple[Path, str]:
    """A non-editable wheel built from the tree without network, and what the build printed."""
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    done = subprocess.run(
        [*pip_wheel, "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = out.glob("robotrl-*.whl")
    return wheel, done.stdout + done.stderr


def test_pyproject_lists_every_package():
    assert discovered_packages() == set(SETUPTOOLS["packages"])


def test_sim_and_hardware_import_inside_robotrl():
    import robotrl.hardware
    import robotrl.sim

    import robotrl

    assert Path(robotrl.sim.__file__).parent == ROOT / "sim"
    assert Path(robotrl.hardware.__file__).parent == ROOT / "hardware"
    assert robotrl.__doc__ and robotrl.sim.__doc__ and robotrl.hardware.__doc__


def test_every_top_level_folder_says_what_lives_there():
    for folder in ("robotrl", "sim", "hardware", "configs", "tests", "launch"):
        path = ROOT / folder
        readme = path / "README.md"
        init = path / "__init__.py"
        assert readme.exists() or (init.exists() and '"""' in init.read_text()), folder


def test_editable_build_of_make_setup_has_no_package_warning(tmp_path):
    """`make setup` installs editable: the same package-data rules apply, and it must stay quiet."""
    build = f"from setuptools import build_meta; build_meta.build_editable({str(tmp_path)!r})"
    done = subprocess.run(
        [sys.executable, "-c", build],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "would be ignored" not in done.stdout + done.stderr, done.stderr


def test_non_editable_wheel_carries_sim_hardware_and_every_preset(tmp_path):
    wheel, printed = build_wheel(tmp_path)
    assert "would be ignored" not in printed, printed
    names = set(zipfile.ZipFile(wheel).namelist())
    assert len(presets()) >= 20
    assert presets() <= names, sorted(presets() - names)
    for required in ("robotrl/sim/__init__.py", "robotrl/hardware/__init__.py", "robotrl/cli.py"):
        assert required in names, required


@pytest.mark.slow
def test_installed_wheel_composes_a_config_outside_the_tree(tmp_path):
    wheel, _ = build_wheel(tmp_path)
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        timeout=300,
    )
    probe = (
        "import robotrl, robotrl.sim, robotrl.hardware, sys;"
        f"assert robotrl.__file__.startswith({str(target)!r}), robotrl.__file__;"
        "from robotrl.config.load import load_config;"
        "print(load_config(['env=so101_pick_place']).env.id)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,  # not the repository, whose robotrl/ would shadow the installed one
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "robotrl/SO101PickPlace-v0"
