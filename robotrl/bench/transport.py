"""`robotrl bench transport`: transitions per second, actor process to learner process, tcp loopback.

Three transports carry the same transitions in the same run, each between two
fresh processes (spawned, so nothing is shared but the socket):

- **robotrl**: :class:`TransitionSender` to :class:`TransitionReceiver`, sequence
  numbers, acks, validation of every message, batches of 64; the learner takes every
  batch through ``recv``. Lost = transitions the actor sent minus those the learner
  received (``recv`` hands out each sequence number once). Batches queued behind one
  another go out joined, as the runtime's default ``transport.coalesce_kb`` makes them.
- **raw pyzmq**: PUSH/PULL of the frames robotrl's codec makes of each batch (encoded once),
  one message per batch, no acks, no decoding: the ceiling for these bytes on this socket.
  **raw pyzmq joined**: the same with the messages a backlog makes (as many batches as
  ``transport.coalesce_kb`` holds, joined): robotrl's bench actor runs ahead of the link, so
  most of its batches travel joined, and this is the ceiling for those messages.
- **lerobot**: its HIL-SERL path. The actor builds lerobot ``Transition`` dicts (float32
  images, next state included, as its actor does), ``torch.save`` s each batch and
  streams it through ``send_bytes_in_chunks`` over its gRPC ``LearnerService.SendTransitions``;
  the learner's own ``LearnerService`` puts the bytes on a queue and the learner loop
  ``torch.load`` s them (``bytes_to_transitions``), as ``process_transitions`` does.

Payloads: state only (224 floats plus the other columns, about 1 KB per transition)
and state plus two 96x96 RGB cameras. Throughput is transitions delivered divided
by the time from the actor's first send to the learner's last receipt. Each ratio to raw
pyzmq is reported under its own name (state against one message per batch, state against
the same joined messages, image); ``ratio_vs_raw_zmq`` is the weakest.

A full run measures each transport for about a second per payload, in three rounds that
alternate robotrl with raw pyzmq (who goes first alternates too), and reports for each ratio
its median round, with that round's transitions per second: on a shared virtual machine raw
pyzmq alone moved by up to half between runs of 0.15 s, so a ratio is taken between
neighbours in time.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing as mp
import queue
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from robotrl.bench.codec import CAMERAS, make_transitions
from robotrl.bench.report import report
from robotrl.config.transport import TransportConfig
from robotrl.core.batch import TransitionBatch
from robotrl.transport.transition_receiver import TransitionReceiver
from robotrl.transport.transitions import TransitionSender

BATCH = 64
ROUNDS = 3
"""Rounds of a full run, robotrl and raw pyzmq side by side in each (their order alternating);
each ratio's median round is reported."""
_TIMEOUT_S = 300.0


def _batch(cameras: tuple[str, ...]) -> TransitionBatch:
    return TransitionBatch.from_transitions(make_transitions(BATCH, cameras, np.random.default_rng(0)))


# -- robotrl ---------------------------------------------------------------------------------


def _ours_learner(conn: Connection, n_batches: int) -> None:
    rx = TransitionReceiver("tcp://127.0.0.1:0")
    conn.send(rx.endpoint)
    got = 0
    deadline = time.monotonic() + _TIMEOUT_S
    while got < n_batches * BATCH and time.monotonic() < deadline:
        batch = rx.recv(1.0)
        if batch is not None:
            got += len(batch)
    rx.commit()
    end = time.monotonic()
    conn.send({"end": end, "received": got})  # recv hands out each numbered message once
    conn.recv()  # the actor has its acks: close
    rx.close()


def _ours_actor(conn: Connection, endpoint: str, cameras: tuple[str, ...], n_batches: int) -> None:
    batch = _batch(cameras)
    coalesce = TransportConfig().coalesce_kb << 10  # the runtime's default: a backlog goes out joined
    window = TransportConfig().send_window
    # Two windows of joined messages ahead: the link never waits on this producer (32 batches
    # did: 0.3x raw for state), and the hand-off queue stays below half full, where batches
    # without a spool would be dropped.
    ahead = 2 * window * joined_batches(cameras)
    tx = TransitionSender(
        endpoint, "actor-0", window=window, max_queue=4 * ahead, max_inflight=64, coalesce_bytes=coalesce
    )
    deadline = time.monotonic() + 30
    while not tx.stats()["learner_alive"] and time.monotonic() < deadline:
        time.sleep(0.01)
    start = time.monotonic()
    sent = 0
    while sent < n_batches:
        if tx.backlog() < ahead and tx.send(batch):
            sent += 1
        else:
            time.sleep(0.0005)
    tx.flush(60)
    conn.send({"start": start, "sent": sent * BATCH, "stats": tx.stats()})
    tx.close()


# -- raw pyzmq -------------------------------------------------------------------------------


def _raw_learner(conn: Connection, n_batches: int, joined: int = 1) -> None:
    import zmq

    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    conn.send(f"tcp://127.0.0.1:{port}")
    got = 0
    while got < n_batches // joined * joined * BATCH and pull.poll(int(_TIMEOUT_S * 1000)):
        pull.recv_multipart(copy=False)
        got += BATCH * joined
    conn.send({"end": time.monotonic(), "received": got})
    conn.recv()
    pull.close(linger=0)
    ctx.term()


def _raw_actor(
    conn: Connection, endpoint: str, cameras: tuple[str, ...], n_batches: int, joined: int = 1
) -> None:
    import zmq

    from robotrl.wire.codec import encode
    from robotrl.wire.messages import joined_batches_to_message

    frames = encode(joined_batches_to_message([_batch(cameras)] * joined, 0))
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.connect(endpoint)
    start = time.monotonic()
    for _ in range(n_batches // joined):
        push.send_multipart(frames, copy=False)
    conn.send({"start": start, "sent": n_batches // joined * joined * BATCH, "stats": {}})
    push.close(linger=-1)
    ctx.term()


# -- lerobot ---------------------------------------------------------------------------------


def serve_lerobot_learner(service: Any) -> tuple[Any, int]:
    """lerobot's learner gRPC ``service`` served on a free local port, as lerobot configures it:
    (the server, its port)."""
    from concurrent.futures import ThreadPoolExecutor

    import grpc
    from lerobot.rl.learner_service import MAX_WORKERS
    from lerobot.transport import services_pb2_grpc
    from lerobot.transport.utils import MAX_MESSAGE_SIZE

    server = grpc.server(
        ThreadPoolExecutor(max_workers=MAX_WORKERS),
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_SIZE),
            ("grpc.max_send_message_length", MAX_MESSAGE_SIZE),
        ],
    )
    services_pb2_grpc.add_LearnerServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


def _lerobot_learner(conn: Connection, n_batches: int) -> None:
    from lerobot.rl.learner_service import LearnerService
    from lerobot.transport.utils import bytes_to_transitions

    shutdown = threading.Event()
    transitions: queue.Queue[bytes] = queue.Queue()
    service = LearnerService(shutdown, queue.Queue(), 4.0, transitions, queue.Queue())
    server, port = serve_lerobot_learner(service)
    conn.send(f"127.0.0.1:{port}")
    got = 0
    deadline = time.monotonic() + _TIMEOUT_S
    while got < n_batches * BATCH and time.monotonic() < deadline:
        try:
            buffer = transitions.get(timeout=1.0)
        except queue.Empty:
            continue
        got += len(bytes_to_transitions(buffer))
    conn.send({"end": time.monotonic(), "received": got})
    conn.recv()
    shutdown.set()
    server.stop(0)


def _lerobot_transitions(cameras: tuple[str, ...]) -> list[Any]:
    """lerobot HIL-SERL transitions of the same content: float32 CHW images in [0, 1]."""
    import torch

    out = []
    for t in make_transitions(BATCH, cameras, np.random.default_rng(0)):
        state = {"observation.state": torch.from_numpy(t.observation.state)[None]}
        for cam, img in t.observation.images.items():
            chw = torch.from_numpy(img).permute(2, 0, 1).float().div(255.0)[None]
            state[f"observation.images.{cam}"] = chw
        out.append(
            {
                "state": state,
                "action": torch.from_numpy(t.action)[None],
                "reward": float(t.reward),
                "next_state": {k: v.clone() for k, v in state.items()},
                "done": bool(t.terminated),
                "truncated": bool(t.truncated),
                "complementary_info": {"discrete_penalty": torch.tensor([0.0])},
            }
        )
    return out


def _lerobot_actor(conn: Connection, endpoint: str, cameras: tuple[str, ...], n_batches: int) -> None:
    import grpc
    from lerobot.rl.actor import push_transitions_to_transport_queue, transitions_stream
    from lerobot.transport import services_pb2, services_pb2_grpc
    from lerobot.transport.utils import grpc_channel_options

    transitions = _lerobot_transitions(cameras)
    channel = grpc.insecure_channel(endpoint, grpc_channel_options())
    stub = services_pb2_grpc.LearnerServiceStub(channel)
    stub.Ready(services_pb2.Empty(), timeout=30)
    outbox: queue.Queue[bytes] = queue.Queue(maxsize=4)
    shutdown = threading.Event()

    def stream_all() -> None:  # as lerobot's send_transitions: the stream ends with an RpcError at close
        with contextlib.suppress(grpc.RpcError):
            stub.SendTransitions(transitions_stream(shutdown, outbox, 0.01))

    stream = threading.Thread(target=stream_all, daemon=True)
    start = time.monotonic()
    stream.start()
    for _ in range(n_batches):
        # Its actor moves every transition to the CPU, checks for NaN and torch.saves the list.
        push_transitions_to_transport_queue([dict(t) for t in transitions], outbox)
    conn.send({"start": start, "sent": n_batches * BATCH, "stats": {}})
    conn.recv()  # the learner has everything
    shutdown.set()
    stream.join(timeout=10)
    channel.close()


# -- driver ----------------------------------------------------------------------------------


def joined_batches(cameras: tuple[str, ...]) -> int:
    """How many batches of ``cameras`` a backlog joins into one message by default."""
    return max(1, (TransportConfig().coalesce_kb << 10) // _batch(cameras).nbytes)


def measure(kind: str, cameras: tuple[str, ...], n_batches: int) -> dict[str, Any]:
    """Run one learner and one actor process; transitions per second and lost transitions.
    ``raw_zmq_joined`` sends messages of :func:`joined_batches` batches, as robotrl's backlog."""
    fns: dict[str, tuple[Callable[..., None], Callable[..., None]]] = {
        "robotrl": (_ours_learner, _ours_actor),
        "raw_zmq": (_raw_learner, _raw_actor),
        "raw_zmq_joined": (
            functools.partial(_raw_learner, joined=joined_batches(cameras)),
            functools.partial(_raw_actor, joined=joined_batches(cameras)),
        ),
        "lerobot": (_lerobot_learner, _lerobot_actor),
    }
    learner_fn, actor_fn = fns[kind]
    ctx = mp.get_context("spawn")
    l_conn, l_child = ctx.Pipe()
    a_conn, a_child = ctx.Pipe()
    learner = ctx.Process(target=learner_fn, args=(l_child, n_batches), daemon=True)
    learner.start()
    try:
        if not l_conn.poll(60):
            raise RuntimeError(f"{kind} learner did not start")
        endpoint = l_conn.recv()
        actor = ctx.Process(target=actor_fn, args=(a_child, endpoint, cameras, n_batches), daemon=True)
        actor.start()
        try:
            if not l_conn.poll(_TIMEOUT_S) or not a_conn.poll(60):
                raise RuntimeError(f"{kind}: no result within {_TIMEOUT_S}s")
            got, sent = l_conn.recv(), a_conn.recv()
            a_conn.send("done")
            l_conn.send("done")
            actor.join(30)
        finally:
            if actor.is_alive():
                actor.kill()
        learner.join(30)
    finally:
        if learner.is_alive():
            learner.kill()
    seconds = got["end"] - sent["start"]
    return {
        "tps": got["received"] / seconds,
        "lost": sent["sent"] - got["received"],
        "sent": sent["sent"],
        "stats": sent["stats"],
    }


def run(quick: bool = False) -> dict[str, Any]:
    counts = {  # batches of 64 per transport and payload: about a second each in a full run
        ("state", "robotrl"): 1000 if quick else 20000,
        ("state", "raw_zmq"): 1000 if quick else 20000,
        ("state", "raw_zmq_joined"): 1000 if quick else 60000,  # about 3x as fast as the others
        ("image", "robotrl"): 30 if quick else 600,
        ("image", "raw_zmq"): 30 if quick else 600,
    }
    if joined_batches(()) == 1:
        del counts[("state", "raw_zmq_joined")]  # nothing joins: the same run as raw_zmq
    rounds = 1 if quick else ROUNDS
    rows = []
    tps: dict[tuple[str, str], list[float]] = {key: [] for key in counts}
    lost = 0
    for round_ in range(1, rounds + 1):
        # Who goes first alternates between rounds.
        order = list(counts.items()) if round_ % 2 else list(reversed(counts.items()))
        for (payload, kind), n_batches in order:
            r = measure(kind, () if payload == "state" else CAMERAS, n_batches)
            tps[(payload, kind)].append(r["tps"])
            lost += r["lost"] if kind == "robotrl" else 0
            rows.append([payload, kind, round_, r["sent"], r["tps"], r["lost"]])
    lerobot: dict[str, float] = {}
    for payload, n_batches in (("state", 10 if quick else 40), ("image", 4 if quick else 15)):
        r = measure("lerobot", () if payload == "state" else CAMERAS, n_batches)
        lerobot[payload] = r["tps"]
        rows.append([payload, "lerobot", 1, r["sent"], r["tps"], r["lost"]])
    raw_joined = ("state", "raw_zmq_joined") if ("state", "raw_zmq_joined") in tps else ("state", "raw_zmq")
    pairs = {  # each ratio: robotrl against the raw run of the same round
        "state": (("state", "robotrl"), ("state", "raw_zmq")),
        "state_same_messages": (("state", "robotrl"), raw_joined),
        "image": (("image", "robotrl"), ("image", "raw_zmq")),
    }
    per_round = {
        name: [a / b for a, b in zip(tps[ours], tps[raw], strict=True)] for name, (ours, raw) in pairs.items()
    }
    chosen = {name: median_round(values) for name, values in per_round.items()}
    ratios = {name: per_round[name][i] for name, i in chosen.items()}

    def at(name: str, key: tuple[str, str]) -> float:
        """``key``'s transitions/s in the round whose ``name`` ratio is the median."""
        return tps[key][chosen[name]]

    result: dict[str, Any] = {
        "bench": "transport",
        "rounds": rounds,
        "state_tps": round(at("state", ("state", "robotrl"))),
        "image_tps": round(at("image", ("image", "robotrl"))),
        "ratio_vs_raw_zmq": round(min(ratios.values()), 3),  # the headline is the weakest
        "lost": lost,
        "lerobot_image_tps": round(lerobot["image"], 1),
        **{f"{name}_ratio_vs_raw_zmq": round(ratio, 3) for name, ratio in ratios.items()},
        **{f"{name}_ratio_vs_raw_zmq_rounds": [round(v, 3) for v in rs] for name, rs in per_round.items()},
        "raw_zmq_state_tps": round(at("state", ("state", "raw_zmq"))),
        "raw_zmq_state_joined_tps": round(at("state_same_messages", raw_joined)),
        "state_batches_joined": joined_batches(()),
        "raw_zmq_image_tps": round(at("image", ("image", "raw_zmq"))),
        "lerobot_state_tps": round(lerobot["state"], 1),
        "image_vs_lerobot": round(at("image", ("image", "robotrl")) / lerobot["image"], 1),
    }
    report(
        f"transport: actor process -> learner process, tcp loopback, batches of {BATCH} "
        f"({'quick' if quick else 'full'} run, {rounds} round{'s' if rounds > 1 else ''})",
        ["payload", "transport", "round", "transitions sent", "transitions/s", "lost"],
        rows,
        result,
    )
    return result


def median_round(values: list[float]) -> int:
    """The index of the median of ``values`` (the lower middle one of an even count): one round's
    figures, all from the same round, rather than medians taken apart."""
    return sorted(range(len(values)), key=values.__getitem__)[(len(values) - 1) // 2]
