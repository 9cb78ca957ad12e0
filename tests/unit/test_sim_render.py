"""The headless GL backend is chosen from what the machine has, and a user's choice wins."""

from __future__ import annotations

import ctypes.util
import glob
import os
import sys

import pytest
from robotrl.sim import render


@pytest.fixture
def headless(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    return monkeypatch


def libraries(monkeypatch, present: set[str], vendors: list[str]) -> None:
    monkeypatch.setattr(
        ctypes.util, "find_library", lambda name: f"lib{name}.so" if name in present else None
    )
    monkeypatch.setattr(glob, "glob", lambda pattern: vendors)


def test_gpu_egl_is_preferred(headless):
    libraries(headless, {"EGL", "OSMesa"}, ["/usr/share/glvnd/egl_vendor.d/10_nvidia.json"])
    assert render.choose_gl_backend() == "egl"


def test_osmesa_without_a_gpu(headless):
    libraries(headless, {"EGL", "OSMesa"}, ["/usr/share/glvnd/egl_vendor.d/50_mesa.json"])
    assert render.choose_gl_backend() == "osmesa"


def test_mesa_egl_when_osmesa_is_missing(headless):
    libraries(headless, {"EGL"}, [])
    assert render.choose_gl_backend() == "egl"


def test_a_display_keeps_mujocos_default(monkeypatch):
    monkeypatch.setenv("DISPLAY", ":0")
    assert render.choose_gl_backend() is None


def test_users_mujoco_gl_is_never_overridden(headless):
    headless.setenv("MUJOCO_GL", "glfw")
    render.configure_gl_backend()
    assert os.environ["MUJOCO_GL"] == "glfw"
