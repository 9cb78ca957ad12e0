"""Fuzzing what a peer can send: every message kind, valid then damaged, through the arrival checks.

Hypothesis runs derandomized (a fixed corpus, the same in every CI run); set
ROBOTRL_FUZZ_EXAMPLES to run many more locally, e.g. the issue's 100,000:
``ROBOTRL_FUZZ_EXAMPLES=100000 pytest --timeout=0 --hypothesis-show-statistics
tests/unit/test_fuzz_wire.py -k damaged``. The same targets over real sockets, against
the real receivers, are in tests/integration/test_fuzz_peers.py;
tests/fuzz/atheris_wire.py drives them with atheris.
"""

from __future__ import annotations

import os

import pytest
from fuzz_targets import fixed_corpus, mutate, parse, valid_messages
from hypothesis import given
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("ROBOTRL_FUZZ_EXAMPLES", "400"))
FUZZ = fixed_corpus(EXAMPLES)
VALID = valid_messages()
values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)


def test_every_valid_message_is_accepted():
    assert [parse(m) for m in VALID] == [None] * len(VALID)


@FUZZ
@given(
    st.integers(0, len(VALID) - 1),
    st.lists(
        st.tuples(st.integers(0, 7), st.integers(0, 1 << 20), st.binary(max_size=64), values), max_size=4
    ),
)
def test_damaged_messages_of_every_kind_are_refused_with_a_reason_or_accepted_whole(kind, damages):
    frames = VALID[kind]
    for how, at, data, value in damages:
        frames = mutate(frames, how, at, data, value) or [b""]
    parse(frames)  # anything but a known refusal (or a clean accept) raises and fails


@FUZZ
@given(st.lists(st.binary(max_size=256), min_size=0, max_size=6))
def test_random_frames_are_refused_with_a_reason(frames):
    if frames:
        assert parse(frames) is not None or frames in VALID


@pytest.mark.parametrize("kind", range(len(VALID)))
def test_every_single_byte_flip_of_every_kind_is_handled(kind):
    """Exhaustive over the header: each byte of it replaced by 0x00 and by 0xff."""
    frames = VALID[kind]
    for pos in range(len(frames[0])):
        for byte in (b"\x00", b"\xff"):
            parse(mutate(frames, 0, pos * len(frames), byte, None))
