"""Packaging: the layout maps into the robotrl namespace, in editable and normal installs."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


def discovered_packages() -> set[str]:
    """Every folder with an __init__.py, named as it imports through package-dir."""
    found = set()
    for package, folder in SETUPTOOLS["package-dir"].items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            found.add(".".join([package, *rel.parts]))
    return found


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


def test_non_editable_wheel_carries_sim_hardware_and_configs(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("robotrl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in (
        "robotrl/sim/__init__.py",
        "robotrl/hardware/__init__.py",
        "robotrl/configs/config.yaml",
        "robotrl/configs/env/so101_reach.yaml",
        "robotrl/cli.py",
    ):
        assert required in names, required

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
