"""Local LeRobotDatasets, read and written in one place (lerobot's own classes, never a hub).

Each transition column is recorded as the lerobot feature its declaration names
(:attr:`robotrl.core.columns.Column.feature`); images as ``observation.images.<camera>``, the
instruction as lerobot's ``task``. The end of an episode follows lerobot's convention:
``next.done`` (terminated or truncated) and ``next.success`` (terminated, unless the
recorder knows the outcome apart from termination), read back as terminated = success
and truncated = done and not success. A dataset without a column's feature reads as the
column's default; ``tick`` and ``episode_id`` then come from lerobot's own frame and
episode indices. The sim condition a recording was made under (``env.scene``) is kept beside
lerobot's metadata, in ``meta/robotrl_scene.json``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from rich.progress import track

from robotrl.core import keys
from robotrl.core.batch import TransitionBatch
from robotrl.core.columns import BY_NAME, Column, Shape

DONE_FEATURE = "next.done"
SUCCESS_FEATURE = "next.success"
SEED_FEATURE = "seed"
"""An actor recording's reset seed of each frame's episode (not a transition column)."""
ROBOT_TYPE = "so101_follower"
EPISODE_INDEX, FRAME_INDEX = "episode_index", "frame_index"
"""lerobot's own indices: where ``episode_id`` and ``tick`` come from when not recorded."""
_LEROBOT_INDEX = {"episode_id": EPISODE_INDEX, "tick": FRAME_INDEX}
SCENE_META = Path("meta") / "robotrl_scene.json"
"""The sim condition (``env.scene``) a dataset was recorded under, relative to its root; lerobot
neither reads nor rewrites it."""


class DatasetError(ValueError):
    """A dataset that is missing, not a local LeRobotDataset, or lacks what its reader needs;
    the message names what is wrong."""


def _feature_of(column: Column) -> str | None:
    """The lerobot feature a column is recorded as (truncation lives in ``next.done``)."""
    return DONE_FEATURE if column.name == "truncated" else column.feature


def _features(
    columns: Iterable[str],
    state_names: Sequence[str],
    action_names: Sequence[str],
    camera_shapes: Mapping[str, tuple[int, int, int]],
    video: bool,
    extra: Mapping[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """The lerobot feature spec of a recording of ``columns``; ``extra`` adds scalar features
    (name -> dtype) that are not transition columns."""
    out: dict[str, dict[str, Any]] = {}
    for c in (BY_NAME[name] for name in columns):
        feature = _feature_of(c)
        if c.shape is Shape.IMAGE:
            for cam, shape in camera_shapes.items():
                out[keys.IMAGE_PREFIX + cam] = {
                    "dtype": "video" if video else "image",
                    "shape": tuple(shape),
                    "names": ["height", "width", "channels"],
                }
        elif c.shape in (Shape.STATE, Shape.ACTION) and feature:
            names = state_names if c.shape is Shape.STATE else action_names
            out[feature] = {"dtype": c.dtype.name, "shape": (len(names),), "names": list(names)}
        elif c.shape is Shape.SCALAR and feature:
            out[feature] = _scalar(c.dtype.name)
    for name, dtype in (extra or {}).items():
        out[name] = _scalar(dtype)
    return out


def _scalar(dtype: str) -> dict[str, Any]:
    return {"dtype": dtype, "shape": (1,), "names": None}


class DatasetWriter:
    """A new local LeRobotDataset at ``root`` recording ``columns``, one episode at a time;
    ``extra`` adds scalar features that are no transition columns (name -> dtype); ``scene``
    the sim condition the episodes are recorded under, kept in :data:`SCENE_META`."""

    def __init__(
        self,
        root: Path,
        repo_id: str,
        fps: float,
        columns: Sequence[str],
        names: tuple[Sequence[str], Sequence[str]],
        camera_shapes: Mapping[str, tuple[int, int, int]],
        video: bool,
        extra: Mapping[str, str] | None = None,
        scene: Mapping[str, Any] | None = None,
    ) -> None:
        """``names``: the state's and the action's entry names."""
        from lerobot.datasets.lerobot_dataset import LeRobotDataset

        self.spec = _features(columns, *names, camera_shapes, video, extra)
        self._columns = [BY_NAME[name] for name in columns]
        self._cameras = list(camera_shapes)
        self.dataset = LeRobotDataset.create(
            repo_id=repo_id,
            fps=round(fps),
            features=self.spec,
            root=root,
            robot_type=ROBOT_TYPE,
            use_videos=video,
            image_writer_threads=2 if camera_shapes else 0,
        )
        if scene is not None:
            (root / SCENE_META).write_text(json.dumps(dict(scene), indent=2) + "\n")

    def add(
        self, values: Mapping[str, Any], success: bool | None = None, extra: Mapping[str, Any] | None = None
    ) -> None:
        """One frame: ``values`` by column name (images: camera -> H x W x 3); ``success`` when it
        is known apart from termination; ``extra`` the non-column features."""
        frame: dict[str, Any] = {}
        for c in self._columns:
            value, feature = values[c.name], _feature_of(c)
            if c.shape is Shape.IMAGE:
                frame.update({keys.IMAGE_PREFIX + cam: value[cam] for cam in self._cameras})
            elif c.shape is Shape.TEXT:
                frame[keys.TASK] = value
            elif feature == DONE_FEATURE:
                frame[DONE_FEATURE] = np.array([bool(values["terminated"]) or bool(value)])
            elif feature:
                frame[feature] = np.asarray(value, c.dtype).reshape(-1)
        if success is not None:
            frame[SUCCESS_FEATURE] = np.array([success])
        for name, value in (extra or {}).items():
            frame[name] = np.asarray(value, self.spec[name]["dtype"]).reshape(1)
        self.dataset.add_frame(frame)

    def save_episode(self) -> None:
        self.dataset.save_episode()

    def discard_episode(self) -> None:
        self.dataset.clear_episode_buffer()

    def finalize(self) -> None:
        self.dataset.finalize()

    @property
    def frames(self) -> int:
        """Frames in the saved episodes."""
        return int(self.dataset.meta.total_frames)


class RecordedDataset:
    """A local LeRobotDataset opened for reading; ``where`` names the setting that pointed here."""

    def __init__(self, root: str | Path, where: str = "dataset") -> None:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset

        self.root = Path(root)
        self.where = f"{where}={str(self.root)!r}"
        if not (self.root / "meta" / "info.json").is_file():
            raise DatasetError(f"{self.where}: not a local LeRobotDataset (no meta/info.json)")
        self.lerobot = LeRobotDataset(f"local/{self.root.name}", root=self.root, return_uint8=True)
        self.features: dict[str, dict[str, Any]] = dict(self.lerobot.features)
        self.fps = float(self.lerobot.fps)
        self.cameras = [
            k.removeprefix(keys.IMAGE_PREFIX) for k in self.features if k.startswith(keys.IMAGE_PREFIX)
        ]
        for c in (BY_NAME["state"], BY_NAME["action"]):
            if c.feature not in self.features:
                raise DatasetError(
                    f"{self.where}: has no {c.feature!r} feature (it has {sorted(self.features)})"
                )
        self._table = self.lerobot.hf_dataset.with_format("numpy")
        self.episode_index = np.asarray(self._table[EPISODE_INDEX], np.int64)

    def __len__(self) -> int:
        return len(self.episode_index)

    @property
    def scene(self) -> dict[str, Any] | None:
        """The sim condition (``env.scene``) the dataset was recorded under; None when it does
        not say (recorded before robotrl kept it, by an actor, or outside robotrl)."""
        path = self.root / SCENE_META
        if not path.is_file():
            return None
        scene: dict[str, Any] = json.loads(path.read_text())
        return scene

    def has(self, column: str) -> bool:
        """Whether the dataset records ``column`` itself (not at its default)."""
        c = BY_NAME[column]
        if c.shape is Shape.IMAGE:
            return bool(self.cameras)
        if c.shape is Shape.TEXT:
            return True
        return _feature_of(c) in self.features

    @property
    def state_dim(self) -> int:
        return self.shape("state")[0]

    @property
    def action_dim(self) -> int:
        return self.shape("action")[0]

    def shape(self, column: str) -> tuple[int, ...]:
        """The recorded shape of one frame of an array column."""
        return tuple(int(x) for x in self.features[str(BY_NAME[column].feature)]["shape"])

    def camera_shape(self, camera: str) -> tuple[int, int, int]:
        """The recorded H x W x 3 shape of a camera's frames."""
        h, w, ch = (int(x) for x in self.features[keys.IMAGE_PREFIX + camera]["shape"])
        return (w, ch, h) if h == 3 and ch != 3 else (h, w, ch)  # some datasets declare C x H x W

    def names(self, column: str) -> tuple[str, ...]:
        """The recorded names of a state or action column's entries (generic names if it has none)."""
        key = str(BY_NAME[column].feature)
        dim = self.shape(column)[0]
        names = self.features[key].get("names")
        if isinstance(names, dict):  # some datasets nest names under a group, e.g. {"motors": [...]}
            names = next(iter(names.values()), None)
        if isinstance(names, list) and len(names) == dim:
            return tuple(str(n) for n in names)
        return tuple(f"{column}_{i}" for i in range(dim))

    def column(self, name: str) -> npt.NDArray[Any]:
        """Every frame's ``name`` (an array column) in the schema's dtype and shape, without
        decoding a video; the default (or lerobot's index) where the dataset lacks it."""
        c = BY_NAME[name]
        if c.name == "truncated" and self.has("truncated"):
            return np.asarray(self._flag(DONE_FEATURE) & ~self.column("terminated"), np.bool_)
        if self.has(name):
            values = np.asarray(self._table[str(c.feature)])
            rows = (len(self),) if c.shape is Shape.SCALAR else (len(self), *values.shape[1:])
            return values.reshape(rows).astype(c.dtype)
        if name in _LEROBOT_INDEX:
            return self.lerobot_index(name)
        return np.full((len(self), *c.row_shape(self)), c.default, c.dtype)

    def lerobot_index(self, column: str) -> npt.NDArray[np.int64]:
        """lerobot's own episode or frame index, for ``episode_id`` or ``tick``."""
        return np.asarray(self._table[_LEROBOT_INDEX[column]], np.int64)

    def _flag(self, feature: str) -> npt.NDArray[np.bool_]:
        return np.asarray(self._table[feature]).reshape(len(self), -1)[:, 0].astype(bool)

    def feature(self, name: str) -> npt.NDArray[Any] | None:
        """A recorded feature that is no transition column (the actor's reset ``seed``), or None."""
        return np.asarray(self._table[name]) if name in self.features else None

    def tasks(self) -> list[str]:
        """Every frame's instruction (lerobot's task)."""
        table = self.lerobot.meta.tasks
        text = {int(i): str(t) for t, i in zip(table.index, table["task_index"], strict=True)}
        return [text[int(i)] for i in np.asarray(self._table["task_index"])]

    def images(
        self, cameras: Sequence[str], rows: Sequence[int] | None = None
    ) -> dict[str, npt.NDArray[np.uint8]]:
        """The frames ``rows`` (all when None) of ``cameras`` as (N, H, W, 3) uint8, each decoded
        once, with a progress bar."""
        chosen = range(len(self)) if rows is None else rows
        out: dict[str, npt.NDArray[np.uint8]] = {
            c: np.empty((len(chosen), *self.camera_shape(c)), np.uint8) for c in self._known(cameras)
        }
        if not cameras:
            return out
        for k, row in enumerate(track(chosen, f"reading {self.root.name}", transient=True)):
            for c, img in self.frame_images(int(row), cameras).items():
                out[c][k] = img
        return out

    def frame_images(self, row: int, cameras: Sequence[str]) -> dict[str, npt.NDArray[np.uint8]]:
        """One frame's ``cameras``, H x W x 3 uint8."""
        if not cameras:
            return {}
        item = self.lerobot[row]
        return {c: _hwc_uint8(item[keys.IMAGE_PREFIX + c]) for c in self._known(cameras)}

    def _known(self, cameras: Sequence[str]) -> Sequence[str]:
        missing = [c for c in cameras if c not in self.cameras]
        if missing:
            raise DatasetError(f"{self.where}: has no camera {missing} (has {self.cameras})")
        return cameras

    def episodes(self) -> list[npt.NDArray[np.int64]]:
        """Each episode's rows, in the dataset's order."""
        return [np.flatnonzero(self.episode_index == ep) for ep in np.unique(self.episode_index).tolist()]

    def batches(self, columns: Iterable[str], cameras: Sequence[str], actor_id: str) -> list[TransitionBatch]:
        """One batch per episode holding the recorded ``columns`` (the others at their defaults)
        and ``cameras``; an episode's last next observation is not recorded."""
        wanted = [BY_NAME[name] for name in columns]
        arrays = {c.name: self.column(c.name) for c in wanted if c.is_array}
        for name in _LEROBOT_INDEX:
            arrays.setdefault(name, self.lerobot_index(name))
        images = self.images(cameras)
        tasks = self.tasks() if any(c.shape is Shape.TEXT for c in wanted) else [""] * len(self)
        out = []
        for rows in self.episodes():
            texts = [tasks[i] for i in rows.tolist()]
            instructions = tuple(dict.fromkeys(texts))
            out.append(
                TransitionBatch.of(
                    actor_id,
                    {name: v[rows] for name, v in arrays.items()},
                    {c: img[rows] for c, img in images.items()},
                    instructions,
                    np.array([instructions.index(t) for t in texts], np.int32),
                )
            )
        return out


def _hwc_uint8(image: Any) -> npt.NDArray[np.uint8]:
    """A dataset frame (C, H, W float in [0, 1] or uint8; or H, W, C) as H x W x 3 uint8."""
    arr = np.asarray(image)
    if arr.ndim == 3 and arr.shape[0] == 3 and arr.shape[2] != 3:
        arr = arr.transpose(1, 2, 0)
    if arr.dtype != np.uint8:
        arr = np.clip(np.rint(arr.astype(np.float32) * 255.0), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(arr)
