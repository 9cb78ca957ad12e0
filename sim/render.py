"""Headless offscreen rendering: pick MuJoCo's GL backend before mujoco is imported.

MuJoCo reads ``MUJOCO_GL`` once, when it is first imported. Without a display we
choose EGL when a GPU vendor library is installed (hardware rendering), and OSMesa
(software, works on any headless machine) otherwise. A user's own ``MUJOCO_GL``
always wins. Under OSMesa, llvmpipe rasterises in the thread that renders (``LP_NUM_THREADS=0``
unless the user set it): at the cameras' small sizes its worker threads cost more hand-offs
than they save, and a control loop waiting on threads that compete with a learner for the
cores inherits their scheduling delays (`robotrl bench actor`: a tick's step-and-render p99
5.7-6.8 ms, max 8-19 ms with them; 2.2 ms, max 3 ms without, at the same steps/s).
"""

from __future__ import annotations

import atexit
import ctypes.util
import glob
import os
import sys
import weakref
from typing import Any


def choose_gl_backend() -> str | None:
    """The backend to use when ``MUJOCO_GL`` is unset, or None to leave MuJoCo's default."""
    if os.environ.get("DISPLAY") or sys.platform in ("darwin", "win32"):
        return None
    gpu_egl = any("nvidia" in p for p in glob.glob("/usr/share/glvnd/egl_vendor.d/*.json"))
    if gpu_egl and ctypes.util.find_library("EGL"):
        return "egl"
    if ctypes.util.find_library("OSMesa"):
        return "osmesa"
    return "egl" if ctypes.util.find_library("EGL") else None


def configure_gl_backend() -> None:
    """Set ``MUJOCO_GL`` (and PyOpenGL's platform) unless the user did or mujoco is loaded."""
    if "MUJOCO_GL" in os.environ or "mujoco" in sys.modules:
        return
    backend = choose_gl_backend()
    if backend is not None:
        os.environ["MUJOCO_GL"] = backend
        os.environ.setdefault("PYOPENGL_PLATFORM", backend)
        if backend == "osmesa":
            os.environ.setdefault("LP_NUM_THREADS", "0")


_LIVE: weakref.WeakSet[Any] = weakref.WeakSet()


@atexit.register
def _close_renderers() -> None:
    """Free GL contexts before interpreter teardown (OSMesa's own finaliser fails after it)."""
    for renderer in list(_LIVE):
        renderer.close()


def make_renderer(model: Any, size: int) -> Any:
    """A ``size`` x ``size`` renderer with shadows, reflections and skybox off.

    Raises an error that says how to fix the GL setup when no context can be made.
    """
    import mujoco

    try:
        renderer = mujoco.Renderer(model, size, size)
    except Exception as exc:
        raise RuntimeError(
            f"MuJoCo offscreen rendering failed with MUJOCO_GL={os.environ.get('MUJOCO_GL')!r}. "
            "Import robotrl.sim before mujoco (it picks a headless backend), or set MUJOCO_GL=osmesa "
            "(Debian: libosmesa6) or MUJOCO_GL=egl (libegl1, and libegl-mesa0 without a GPU)."
        ) from exc
    _LIVE.add(renderer)
    flags = renderer.scene.flags  # shadows and reflections cost a software rasteriser ~20x
    flags[mujoco.mjtRndFlag.mjRND_SHADOW] = False
    flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = False
    flags[mujoco.mjtRndFlag.mjRND_SKYBOX] = False
    return renderer
