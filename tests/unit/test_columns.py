"""The transition schema drives every representation: each column declared in robotrl.core.columns
survives the wire, a replay insert and a LeRobotDataset write/read; the typed dataclasses agree
with it. Parametrised over the schema, so a new column is tested without an edit here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from robotrl.actor.dataset import DatasetRecorder
from robotrl.bench.codec import Sizes, random_batch
from robotrl.core.batch import TransitionBatch
from robotrl.core.columns import ARRAY_COLUMNS, COLUMNS, Column, Shape
from robotrl.core.types import EnvSpec, Observation, Transition
from robotrl.data.lerobot_dataset import RecordedDataset
from robotrl.learner.replay import ChunkReplay, ReplaySpec
from robotrl.wire.codec import decode, encode
from robotrl.wire.messages import message_to_transition_batch, transition_batch_to_message

SIZES = Sizes(state_dim=5, action_dim=3, image_size=8)
CAMERAS = ("front", "wrist")
IDS = [c.name for c in COLUMNS]


def sent() -> TransitionBatch:
    return random_batch(9, CAMERAS, np.random.default_rng(4), SIZES)


def assert_column_equal(column: Column, got: TransitionBatch, want: TransitionBatch, next_too: bool) -> None:
    """``column`` holds the same values (dtype included) in ``got`` as in ``want``."""
    if column.shape is Shape.TEXT:
        texts = [[b.instructions[i] for i in b.instruction_index.tolist()] for b in (got, want)]
        assert texts[0] == texts[1]
        return
    names = [column.name, column.next_name] if next_too and column.next_name else [column.name]
    for name in names:
        a, b = getattr(got, name), getattr(want, name)
        if column.shape is Shape.IMAGE:
            assert a.keys() == b.keys() and a.keys()
            for cam in a:
                np.testing.assert_array_equal(a[cam], b[cam])
        else:
            assert a.dtype == b.dtype == column.dtype, name
            np.testing.assert_array_equal(a, b, err_msg=name)


def test_the_typed_dataclasses_have_a_field_for_every_column_and_no_other():
    on_transition = {c.source for c in COLUMNS if not c.source.startswith("observation.")}
    on_observation = {
        c.source.removeprefix("observation.") for c in COLUMNS if c.source.startswith("observation.")
    }
    assert {f.name for f in dataclasses.fields(Transition)} == on_transition | {
        "actor_id",
        "observation",
        "next_observation",
    }
    assert {f.name for f in dataclasses.fields(Observation)} == on_observation | {"tick"}
    in_batch = {c.name for c in COLUMNS if c.shape is not Shape.TEXT} | {
        c.next_name for c in COLUMNS if c.next_name
    }
    assert {f.name for f in dataclasses.fields(TransitionBatch)} == in_batch | {
        "actor_id",
        "instructions",
        "instruction_index",
        "next_rows",
    }


def test_a_batch_built_from_some_columns_holds_the_defaults_in_the_others():
    batch = TransitionBatch.of("a", {"state": np.zeros((4, 2)), "action": np.ones((4, 3))})
    for c in ARRAY_COLUMNS:
        assert getattr(batch, c.name).dtype == c.dtype
        if c.name not in ("state", "action"):
            assert (getattr(batch, c.name) == c.default).all(), c.name
    assert batch.proposed_action.shape == (4, 3) and len(batch.next_rows) == 0


def test_transitions_and_batches_convert_losslessly():
    batch = sent()
    again = TransitionBatch.from_transitions(batch.to_transitions())
    for c in COLUMNS:
        assert_column_equal(c, again, batch, next_too=True)


@pytest.mark.parametrize("column", COLUMNS, ids=IDS)
def test_every_column_survives_the_wire(column: Column):
    batch = sent()
    frames = encode(transition_batch_to_message(batch, seq=3))
    got = message_to_transition_batch(decode([bytes(f) for f in frames]))
    assert_column_equal(column, got, batch, next_too=True)


@pytest.fixture(scope="module")
def replayed() -> tuple[TransitionBatch, TransitionBatch]:
    batch = sent()
    cameras = {c: (SIZES.image_size, SIZES.image_size, 3) for c in CAMERAS}
    replay = ChunkReplay(ReplaySpec(SIZES.state_dim, SIZES.action_dim, 4, cameras), 64)
    added = replay.add(batch)
    rows = list(zip(added.positions.tolist(), added.serials.tolist(), strict=True))
    nxt = (int(added.next_positions[0]), int(added.next_serials[0]))
    got = replay.gather(rows, nxt, batch.actor_id, episode_id=7, terminated=True)
    replay.close()
    assert got is not None
    return got, batch


@pytest.mark.parametrize("column", COLUMNS, ids=IDS)
def test_every_column_survives_a_replay_insert(
    column: Column, replayed: tuple[TransitionBatch, TransitionBatch]
):
    assert_column_equal(column, *replayed, next_too=True)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[TransitionBatch, TransitionBatch]:
    batch = sent()
    root = tmp_path_factory.mktemp("columns") / "ds"
    spec = EnvSpec(
        name="random",
        action_names=tuple(f"a{i}" for i in range(SIZES.action_dim)),
        action_low=(-1.0,) * SIZES.action_dim,
        action_high=(1.0,) * SIZES.action_dim,
        state_names=tuple(f"s{i}" for i in range(SIZES.state_dim)),
        camera_shapes={c: (SIZES.image_size, SIZES.image_size, 3) for c in CAMERAS},
    )
    recorder = DatasetRecorder(root, spec, seed_base=0, block=True, video=False)
    recorder(batch.to_transitions())
    assert recorder.close()["frames"] == len(batch)
    (got,) = RecordedDataset(Path(root)).batches([c.name for c in COLUMNS], CAMERAS, batch.actor_id)
    return got, batch


@pytest.mark.parametrize("column", COLUMNS, ids=IDS)
def test_every_column_survives_a_dataset_write_and_read(
    column: Column, recorded: tuple[TransitionBatch, TransitionBatch]
):
    assert_column_equal(column, *recorded, next_too=False)  # a dataset has no next observation
