"""A stateful Hypothesis test of the real TransitionReceiver over a real socket.

Hypothesis drives sequences of what actors do (ping as a known or a made-up actor, send
a batch, resend one, start a new stream, reconnect) and what the learner does (take the
next batch, which acknowledges the one before), and after every step checks: no batch is
handed out twice, state exists only for actors that sent a valid batch and stays within
the caps. At the end every batch handed out must have been acknowledged (an actor that
missed an ack resends, and the duplicate is acknowledged again).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import zmq
from fuzz_targets import valid_messages
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from waiting import wait_until

from robotrl.transport import protocol as p
from robotrl.transport.transition_receiver import TransitionReceiver
from robotrl.wire.codec import Message, decode, encode

sys.path.insert(0, str(Path(__file__).parent))
from transport_peers import HEARTBEAT_S

ACTORS = ("a0", "a1", "a2")
MAX_ACTORS = 2
KEEP_SUPERSEDED = 16
BATCH = decode(valid_messages()[0])
EXAMPLES = int(os.environ.get("ROBOTRL_STATEFUL_EXAMPLES", "12"))


class ReceiverMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # peers never time out here: the cap is reached and stays reached
        self.rx = TransitionReceiver(
            "tcp://127.0.0.1:0", heartbeat_s=HEARTBEAT_S, peer_timeout_s=3600.0, max_actors=MAX_ACTORS
        )
        self.ctx = zmq.Context()
        self.sock = self._connect()
        self.streams = dict.fromkeys(ACTORS, 0)  # each actor's current incarnation
        self.next_seq: dict[tuple[str, str], int] = {}
        self.sent: list[tuple[str, str, int]] = []
        self.handed_out: set[tuple[str, str, int]] = set()
        self.acked: set[tuple[str, str, int]] = set()
        self.pongs = 0

    def _connect(self) -> zmq.Socket:
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.rx.endpoint)
        return sock

    def _drain(self, until, what: str) -> None:
        """Read pongs and acks until ``until()`` holds."""

        def read() -> None:
            while self.sock.poll(10):
                msg = decode(self.sock.recv_multipart())
                if msg.kind == p.PONG:
                    self.pongs += 1
                elif msg.kind == p.ACK:
                    stream = p.meta_str(msg, "stream")
                    actor = stream.split("/")[0]
                    for lo, hi in p.ack_ranges(msg):
                        self.acked.update((actor, stream, s) for s in range(lo, hi))

        wait_until(until, 30, what, on_wait=read)

    def _handled(self) -> int:
        return sum(self.rx.stats().values())

    def _send_batch(self, key: tuple[str, str, int]) -> None:
        actor, stream, seq = key
        before = self._handled()
        meta = {**BATCH.meta, "stream": stream}
        self.sock.send_multipart(encode(Message(BATCH.kind, actor, seq, BATCH.arrays, meta)))
        self._drain(lambda: self._handled() > before, f"batch {key} to be handled")

    @rule(actor=st.sampled_from(ACTORS))
    def batch(self, actor: str) -> None:
        stream = f"{actor}/{self.streams[actor]:04d}"
        seq = self.next_seq.get((actor, stream), 0)
        self.next_seq[(actor, stream)] = seq + 1
        self.sent.append((actor, stream, seq))
        self._send_batch((actor, stream, seq))

    @precondition(lambda self: self.sent)
    @rule(data=st.data())
    def resend(self, data: st.DataObject) -> None:
        self._send_batch(data.draw(st.sampled_from(self.sent)))

    @rule(actor=st.sampled_from(ACTORS), made_up=st.booleans(), ahead=st.sampled_from([0, 1, 2**62]))
    def ping(self, actor: str, made_up: bool, ahead: int) -> None:
        sender = f"mallory-{len(self.sent)}" if made_up else actor
        stream = f"{actor}/{self.streams[actor]:04d}"
        upto = self.next_seq.get((actor, stream), 0) + ahead
        before, rejected = self.pongs, self._handled()
        self.sock.send_multipart(encode(p.control(p.PING, sender, stream=stream, next=upto, dropped=0)))
        self._drain(lambda: self.pongs > before or self._handled() > rejected, "the ping answered or refused")

    @rule(actor=st.sampled_from(ACTORS))
    def new_stream(self, actor: str) -> None:
        self.streams[actor] += 1  # the actor restarted: a new incarnation numbered from 0

    @rule()
    def reconnect(self) -> None:
        self.sock.close()
        self.sock = self._connect()  # acks in flight to the old connection are lost
        # As a real sender does at its next heartbeat: each actor pings from the new connection,
        # which is where the learner's acks go from then on (a batch alone does not move them).
        for actor in ACTORS:
            self.ping(actor, made_up=False, ahead=0)

    @precondition(lambda self: self.rx.stats()["received"] > len(self.handed_out))
    @rule()
    def take(self) -> None:
        item = self.rx.recv_item(30.0)
        assert item is not None
        key = (item.actor_id, item.stream, item.seq)
        assert key not in self.handed_out, f"{key} handed out twice"
        self.handed_out.add(key)

    @invariant()
    def state_is_bounded_and_only_from_batches(self) -> None:
        tracked = set(self.rx.actors_alive())
        assert len(tracked) <= MAX_ACTORS and tracked <= set(ACTORS)
        accounts = self.rx.ledger.accounts()
        assert {a.actor_id for a in accounts} <= tracked | set(ACTORS)
        assert len(accounts) <= len(ACTORS) * (KEEP_SUPERSEDED + 1)
        # a ping may count one batch numbered and not yet sent; never the absurd count
        assert all(a.numbered <= self.next_seq.get((a.actor_id, a.stream), 0) + 1 for a in accounts)

    def teardown(self) -> None:
        try:
            self.rx.commit()
            for key in sorted(self.handed_out - self.acked):
                # its ack went to a closed connection: the actor resends and is acked again
                self._send_batch(key)
                self._drain(lambda key=key: key in self.acked, f"an ack of {key}")
        finally:
            self.sock.close()
            self.ctx.term()
            self.rx.close()


ReceiverMachine.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
TestReceiverMachine = ReceiverMachine.TestCase
