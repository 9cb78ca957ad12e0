"""Weight updates across learner restarts: (session, version) order on the actor's weight path.

The stateful test drives the real WeightSubscriber with real wire messages (encoded and
decoded by the codec, as its I/O thread receives them) and hands what it verifies to real
PolicySlots, through sessions, versions, duplicates, corrupt digests, partial updates,
reconnects and replays of replaced sessions.
"""

from __future__ import annotations

import logging
import secrets
import tempfile
from dataclasses import dataclass

import numpy as np
from doubles import TickPolicy
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from robotrl.actor.slots import PolicySlots
from robotrl.core.sessions import OLD_SESSION, STALE_VERSION, SessionVersions
from robotrl.core.types import WeightUpdate, weights_digest
from robotrl.transport import protocol as p
from robotrl.transport.weight_subscriber import WeightSubscriber
from robotrl.wire.codec import Message, decode, encode


class ManualClock:
    """Time that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def bias_update(version: int, session: str) -> WeightUpdate:
    tensors = {"bias": np.array([version], np.float32)}
    return WeightUpdate(version, tensors, weights_digest(tensors), "trainable", 0.0, session)


def test_a_new_sessions_lower_versions_are_staged_and_the_replaced_session_never_again(caplog):
    caplog.set_level(logging.INFO, logger="robotrl.actor.slots")
    slots = PolicySlots(TickPolicy(horizon=4), TickPolicy(horizon=4), policy_version=0)
    assert slots.stage(bias_update(5, "first")) and slots.swap_if_staged()
    assert slots.stage(bias_update(1, "second")) and slots.swap_if_staged()
    assert slots.policy_version == 1 and float(slots.active.trainable_tensors()["bias"][0]) == 1.0
    assert "learner session changed ('first' at v5 -> 'second' at v1)" in caplog.text
    assert not slots.stage(bias_update(9, "first"))  # above everything, but of the replaced session
    assert not slots.stage(bias_update(1, "second"))  # a duplicate
    assert slots.refused == {OLD_SESSION: 1, STALE_VERSION: 1} and slots.policy_version == 1


def test_refusals_are_logged_at_most_once_per_interval_with_a_count_of_the_rest(caplog):
    clock = ManualClock()
    slots = PolicySlots(TickPolicy(horizon=4), TickPolicy(horizon=4), policy_version=3, clock=clock)
    for _ in range(50):
        slots.stage(bias_update(2, ""))
    clock.now = 10.0
    slots.stage(bias_update(2, ""))
    lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert slots.refused[STALE_VERSION] == 51 and len(lines) == 2
    assert "stale_version" in lines[0] and lines[1].endswith("(50 times since the last such line, 51 in all)")


def test_replaced_sessions_are_remembered_up_to_a_bound():
    versions = SessionVersions()
    for i in range(1100):
        versions.follow(f"s{i}")
    assert versions.replaced("s1098") and versions.replaced("") is False
    assert versions.refusal("s1099", 0) is None and versions.refusal("s1098", 0) == OLD_SESSION


@dataclass
class Publisher:
    """One learner process as the actor sees it: a session and the last version it numbered."""

    session: str
    version: int


class WeightPathMachine(RuleBasedStateMachine):
    """Publisher messages in any order the faults allow; the actor's path must keep its promises."""

    @initialize()
    def start(self) -> None:
        self.clock = ManualClock()  # constant: the link's own thread never times out and reconnects
        # Never bound: the test hands the subscriber its publisher's messages, in the order it chooses.
        nobody = f"ipc://{tempfile.gettempdir()}/robotrl-no-publisher-{secrets.token_hex(8)}"
        self.sub = WeightSubscriber(nobody, heartbeat_s=1.0, peer_timeout_s=5.0, clock=self.clock)
        self.slots = PolicySlots(TickPolicy(horizon=4), TickPolicy(horizon=4), clock=self.clock)
        self.current = Publisher(secrets.token_hex(8), 0)
        self.replaced: list[Publisher] = []
        self.staged: tuple[str, int] | None = None
        self.active: list[tuple[str, int]] = []  # (session, version) of every swap
        self._deliver([p.control(p.WBEAT, "learner", session=self.current.session, latest=-1)])

    def teardown(self) -> None:
        if hasattr(self, "sub"):
            self.sub.close()

    # -- what the publisher side sends -------------------------------------------------------

    def _deliver(self, messages: list[Message]) -> None:
        for message in messages:
            self.sub.on_message(decode([bytes(f) for f in encode(message)]))

    def _update(
        self, publisher: Publisher, version: int, *, corrupt: bool = False, seal: bool = True
    ) -> None:
        """The pieces and seal of one version, as the publisher sends them; then the actor takes it."""
        tensors = {"bias": np.array([version], np.float32)}
        digest = "00" * 32 if corrupt else weights_digest(tensors)
        meta = {
            "subset": "trainable",
            "created_time": 0.0,
            "index": 0,
            "count": 1,
            "session": publisher.session,
        }
        messages = [Message(p.WPIECE, "learner", version, tensors, meta)]
        if seal:
            seal_meta = {"digest": digest, "count": 1, "session": publisher.session}
            messages.append(Message(p.WSEAL, "learner", version, {}, seal_meta))
        counted = self._outcomes()
        self._deliver(messages)
        if seal:
            assert self._outcomes() > counted, "an update was neither verified nor counted as refused"
        self._actor_takes()

    def _outcomes(self) -> int:
        stats = self.sub.stats()
        return (
            stats["verified"] + stats["stale"] + sum(v for k, v in stats.items() if k.startswith("refused_"))
        )

    def _actor_takes(self) -> None:
        """The worker's loader and serving threads, once."""
        update = self.sub.latest()
        if update is not None:
            self._stage(update)
        if self.slots.swap_if_staged():
            assert self.staged is not None
            self.active.append(self.staged)
            self.staged = None

    def _stage(self, update: WeightUpdate) -> bool:
        refused = sum(self.slots.refused.values())
        if self.slots.stage(update):
            self.staged = (update.session, update.policy_version)
            return True
        assert sum(self.slots.refused.values()) == refused + 1, "a refused stage was not counted"
        return False

    # -- rules -------------------------------------------------------------------------------

    @rule(step=st.integers(1, 3))
    def publish(self, step: int) -> None:
        self.current.version += step
        self._update(self.current, self.current.version)
        assert self.active[-1] == (self.current.session, self.current.version), "the newest was not followed"

    @rule(first=st.integers(1, 4))
    def learner_restarts_without_checkpoint(self, first: int) -> None:
        self.replaced.append(self.current)
        self.current = Publisher(secrets.token_hex(8), first - 1)
        self._deliver([p.control(p.WBEAT, "learner", session=self.current.session, latest=-1)])

    @precondition(lambda self: self.current.version > 0)
    @rule()
    def duplicate(self) -> None:
        self._update(self.current, self.current.version)

    @rule()
    def corrupt_digest(self) -> None:
        self.current.version += 1
        self._update(self.current, self.current.version, corrupt=True)

    @rule()
    def piece_without_seal_then_reconnect(self) -> None:
        self.current.version += 1
        self._update(self.current, self.current.version, seal=False)
        self.sub.on_reconnect()

    @precondition(lambda self: self.replaced)
    @rule(data=st.data(), version=st.integers(0, 50), with_beat=st.booleans())
    def replay_of_a_replaced_session(self, data: st.DataObject, version: int, with_beat: bool) -> None:
        old = data.draw(st.sampled_from(self.replaced))
        if with_beat:
            self._deliver([p.control(p.WBEAT, "learner", session=old.session, latest=version)])
        self._update(old, version)
        assert self.sub.stats()["publisher_session"] == self.current.session

    @precondition(lambda self: self.replaced)
    @rule(data=st.data(), version=st.integers(0, 50))
    def replaced_session_handed_to_the_slots_directly(self, data: st.DataObject, version: int) -> None:
        old = data.draw(st.sampled_from(self.replaced))
        if old.session in {s for s, _ in self.active} and old.session != self.active[-1][0]:
            assert not self._stage(bias_update(version, old.session))  # the slots left it: never again

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def versions_rise_within_a_session_and_never_return_to_an_old_one(self) -> None:
        left: set[str] = set()
        for (before_s, before_v), (after_s, after_v) in zip(self.active, self.active[1:], strict=False):
            assert after_s not in left, f"back to replaced session {after_s}: {self.active}"
            if after_s == before_s:
                assert after_v > before_v, f"version went from {before_v} to {after_v}: {self.active}"
            else:
                left.add(before_s)

    @invariant()
    def the_active_weights_are_their_versions(self) -> None:
        if self.active:
            assert float(self.slots.active.trainable_tensors()["bias"][0]) == self.active[-1][1]


TestWeightPath = WeightPathMachine.TestCase
