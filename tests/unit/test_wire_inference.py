"""The actor <-> inference worker messages: round trips through the codec, and refusals."""

from __future__ import annotations

import numpy as np
import pytest

from robotrl.core.types import InferenceReply, InferenceRequest, Observation
from robotrl.wire import inference as wi
from robotrl.wire.codec import Message, WireError, decode, encode


def _request(prefix: bool) -> InferenceRequest:
    obs = Observation(
        7,
        np.arange(4, dtype=np.float32),
        {"front": np.full((4, 4, 3), 9, np.uint8)},
        "pick the cube",
        1.25,
    )
    chunk = np.ones((2, 3), np.float32) if prefix else None
    return InferenceRequest(11, 3, obs, chunk, 2, 99)


@pytest.mark.parametrize("prefix", [True, False])
def test_a_request_survives_the_wire(prefix):
    sent = _request(prefix)
    got = wi.message_to_request(decode(encode(wi.request_to_message(sent))))
    assert (got.request_id, got.epoch, got.delay, got.seed) == (11, 3, 2, 99)
    assert (got.observation.tick, got.observation.instruction, got.observation.timestamp) == (
        7,
        "pick the cube",
        1.25,
    )
    np.testing.assert_array_equal(got.observation.state, sent.observation.state)
    np.testing.assert_array_equal(got.observation.images["front"], sent.observation.images["front"])
    assert (got.prefix is None) == (not prefix)


def test_a_reply_survives_the_wire_with_or_without_actions():
    ok = InferenceReply(5, 1, 7, np.zeros((8, 3), np.float32), 4, 0.02)
    got = wi.message_to_reply(decode(encode(wi.reply_to_message(ok))))
    assert (got.request_id, got.policy_version, got.infer_s, got.error) == (5, 4, 0.02, None)
    assert got.actions is not None and got.actions.shape == (8, 3)
    failed = InferenceReply(6, 1, 7, None, 4, 0.0, "boom")
    assert wi.message_to_reply(decode(encode(wi.reply_to_message(failed)))) == failed


def test_ready_survives_the_wire():
    ready = wi.WorkerReady(horizon=16, max_delay=-1, action_dim=6, policy_version=3, pid=1234)
    assert wi.message_to_ready(decode(encode(wi.ready_to_message(ready)))) == ready


def test_staged_weights_say_when_they_were_installed():
    assert wi.message_to_staged(decode(encode(wi.staged_message(9, 1234.5)))) == (9, 1234.5)
    for meta in ({}, {"staged_at": "soon"}, {"staged_at": True}):
        with pytest.raises(WireError) as info:
            wi.message_to_staged(Message(wi.STAGED, "worker", 9, {}, meta))
        assert info.value.reason == "schema"


def test_malformed_messages_are_refused_as_schema_errors():
    good = wi.request_to_message(_request(True))
    bad_meta = Message(good.kind, good.sender, good.seq, good.arrays, {**good.meta, "tick": "7"})
    no_state = Message(good.kind, good.sender, good.seq, {"prefix": good.arrays["prefix"]}, good.meta)
    flag_as_int = Message(good.kind, good.sender, good.seq, good.arrays, {**good.meta, "seed": True})
    wrong_kind = Message("chunk", good.sender, good.seq, good.arrays, good.meta)
    for message in (bad_meta, no_state, flag_as_int, wrong_kind):
        with pytest.raises(WireError) as info:
            wi.message_to_request(message)
        assert info.value.reason == "schema"
    reply = wi.reply_to_message(InferenceReply(5, 1, 7, None, 4, 0.02))
    with pytest.raises(WireError, match="error"):
        wi.message_to_reply(Message(reply.kind, reply.sender, reply.seq, {}, {**reply.meta, "error": 3}))
