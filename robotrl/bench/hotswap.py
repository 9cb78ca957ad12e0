"""`robotrl bench hotswap`: 50M parameters hot-swapped into an actor that keeps its 50 Hz deadlines.

Three processes, as `robotrl actor` runs: a learner, the actor's control process and
its inference worker. The learner holds a 50M-parameter policy (12 linear layers of
2048x2048, float32, about 200 MB) and publishes it through a :class:`WeightPublisher`,
changing it in place between publications as training would. The control process is
the real actor: :func:`~robotrl.actor.compose.build_loop`'s 50 Hz wall-clock loop on the
simulated arm, with the policy in the real inference worker
(:class:`~robotrl.actor.worker.ProcessInference`), whose loader thread takes each
verified update from a :class:`WeightSubscriber` into the spare of its two weight
slots, swapped between two inferences (each a real forward pass through the stack).
Measured, from the learner's ``publish`` call (before any copy or serialisation): the
call itself (the snapshot copy), publish-to-installed, to the worker's loader having the
verified update in the spare slot (the worker's own ``time.monotonic`` stamp), and
publish-to-active, to the first chunk of the new version entering the actor's action queue
(the difference: waiting for the running inference, the swap and one inference), and
publish-to-acting, to the first tick whose action came from that chunk (the loop may merge a
chunk between ticks: the arm acts on it at the next one, up to a period later), after four
warm-up publications (reported apart) in which the publisher allocates its buffers; missed
deadlines and starved ticks of the control loop over the whole run; the latest tick start.
Both weight paths run, one after the other (:data:`PATHS`): shared memory, which an actor on
the learner's host gets by default, and pieces over loopback TCP, which stands in for an
actor on another host (where the network adds its own time); the headline figures are the
slower path's.

Both learners run at a lower CPU priority (nice 10): they stand in for the GPU host,
and on one small machine they would otherwise take the CPU from the actor's control
loop, which on a real deployment they never share.

In the same run, lerobot's own weight path on the same weights: its learner
``state_to_bytes`` (``torch.save``) onto a ``torch.multiprocessing.Queue``, its
``LearnerService.StreamParameters`` sending the bytes over gRPC in 2 MB chunks, its
actor's ``receive_bytes_in_chunks`` onto another such queue, then
``bytes_to_state_dict`` (``torch.load``, ``weights_only``) and ``load_state_dict``.
Timed from before ``torch.save`` to after ``load_state_dict``.
"""

from __future__ import annotations

import contextlib
import functools
import math
import multiprocessing as mp
import statistics
import threading
import time
from collections.abc import Mapping
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from robotrl.bench.report import report
from robotrl.core.types import FloatArray, Observation
from robotrl.policy.weights import load_parameters
from robotrl.transport.background import lower_priority
from robotrl.transport.hotswap import expected_layout, module_tensors
from robotrl.transport.weight_subscriber import WeightSubscriber
from robotrl.transport.weights import WeightPublisher

WIDTH = 2048
LAYERS = 12  # 12 x (2048 x 2048 + 2048) = 50.3M parameters
CONTROL_HZ = 50.0
INFERENCE_S = 0.02
WARMUP = 4  # publications before the measured ones: the publisher's buffers (4 segments) get made


def make_policy(seed: int) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    return torch.nn.Sequential(*(torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)))


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# -- robotrl ---------------------------------------------------------------------------------


def _learner(conn: Connection, actor: Connection, rounds: int, shared_memory: bool) -> None:
    lower_priority()  # it stands in for the GPU host: on one machine it must not starve the actor
    policy = make_policy(0)
    pub = WeightPublisher("tcp://127.0.0.1:0", shared_memory=shared_memory)
    conn.send(pub.endpoint)
    if not actor.poll(120):
        raise RuntimeError("actor never became ready")
    actor.recv()
    latencies = []
    for i in range(WARMUP + rounds):
        with torch.no_grad():  # a training step changes the weights in place
            policy[i % LAYERS].weight.mul_(0.999)  # type: ignore[operator]
        called = time.monotonic()  # CLOCK_MONOTONIC: one time line for every process on this host
        version = pub.publish(module_tensors(policy))
        returned = time.monotonic()
        installed = active = math.nan
        while True:
            if not actor.poll(30):
                raise RuntimeError(f"version {version} never acted on")
            event, seen, at = actor.recv()
            if event == "installed" and seen == version:
                installed = at
            elif event == "active" and seen == version:
                active = at
            elif event == "acting" and seen == version:
                latencies.append((returned - called, installed - called, active - called, at - called))
                break
        time.sleep(0.1)
    actor.send("stop")
    conn.send(latencies)
    pub.close()


class StackPolicy(torch.nn.Module):
    """A 50M-parameter ChunkPolicy: one real forward pass through the stack per chunk, and a
    chunk that holds the arm's current pose (the bench is about weights, not behaviour)."""

    horizon = 25
    action_dim = 6

    def __init__(self, seed: int = 1) -> None:
        super().__init__()
        self.net = make_policy(seed)

    def infer(self, observation: Observation, prefix: FloatArray | None, delay: int) -> FloatArray:
        with torch.inference_mode():
            self.net(torch.ones(1, WIDTH))
        chunk = np.repeat(observation.state[None, : self.action_dim], self.horizon, axis=0).astype(np.float32)
        if prefix is not None and delay:
            chunk[:delay] = prefix[:delay]
        return chunk

    def per_sample_loss(self, batch: Mapping[str, Any]) -> Any:
        raise NotImplementedError("the hot-swap bench never trains")

    def trainable_tensors(self) -> dict[str, npt.NDArray[Any]]:
        return module_tensors(self.net)

    def load_weights(self, tensors: Mapping[str, npt.NDArray[Any]], *, zero_copy: bool = False) -> None:
        load_parameters(self.net, tensors, zero_copy=zero_copy, owner="the stack")


def stack_policy() -> StackPolicy:
    """Worker-side factory (named in the WorkerSpec)."""
    return StackPolicy()


def subscriber(endpoint: str) -> WeightSubscriber:
    """Worker-side weight source: verified updates that fit the stack's layout."""
    return WeightSubscriber(endpoint, expected=expected_layout(make_policy(1)))


class _ReportNewVersions:
    """Loop observer: tells the learner when the worker installed each new version in its spare
    slot (the worker's own time stamp), when its first chunk reached the queue, and when the
    first tick after that acted (on that chunk: the bench's strategy, naive_async, runs a new
    chunk from the tick it is merged for)."""

    def __init__(self, learner: Connection, backend: Any, loop_stop: Any) -> None:
        self._learner = learner
        self._backend = backend
        self._active = 0
        self._acting = 0
        self._installed = 0
        self.stop = loop_stop

    def _report_installed(self) -> None:
        version = self._backend.newest_version()
        if version > self._installed:
            self._installed = version
            self._learner.send(("installed", version, self._backend.newest_staged_at()))

    def on_tick(self, *_: Any) -> None:
        if self._learner.poll(0):  # the learner is done: end the episode
            self.stop()
        self._report_installed()
        if self._active > self._acting:
            self._acting = self._active
            self._learner.send(("acting", self._active, time.monotonic()))

    def on_chunk(self, episode_id: int, chunk: Any) -> None:
        self._report_installed()  # the loop may merge the new chunk between ticks, before on_tick
        if chunk.policy_version > self._active:
            self._active = chunk.policy_version
            self._learner.send(("active", chunk.policy_version, time.monotonic()))

    def close(self) -> None:
        pass


def _actor(conn: Connection, learner: Connection, endpoint: str) -> None:
    """The actor's control process, as `robotrl actor` builds it: the real control loop at 50 Hz on
    the simulated arm, the policy in the real inference worker with its two weight slots."""
    from robotrl.actor.compose import build_loop
    from robotrl.actor.worker import ProcessInference, WorkerSpec
    from robotrl.config.actor import ActorConfig, Strategy
    from robotrl.config.env import EnvConfig
    from robotrl.sim import make_env

    env = make_env(
        EnvConfig(id="robotrl/SO101Reach-v0", control_hz=CONTROL_HZ, cameras=[], max_episode_ticks=10**6)
    )
    spec = WorkerSpec(
        "robotrl.bench.hotswap:stack_policy",
        weights_factory="robotrl.bench.hotswap:subscriber",
        weights_kwargs={"endpoint": endpoint},
        torch_threads=1,
    )
    backend = ProcessInference(spec)
    cfg = ActorConfig(strategy=Strategy.naive_async, virtual_time=False)
    observer = _ReportNewVersions(learner, backend, lambda: None)
    loop = build_loop(env, backend, cfg, StackPolicy.horizon, latency=None, observer=observer)
    observer.stop = loop.request_stop
    learner.send("ready")
    try:
        result = loop.run_episode(0, seed=0)
    finally:
        backend.close()
        env.close()
    conn.send(
        {
            "ticks": result.ticks,
            "missed": result.missed_deadlines,
            "worst_late_ms": max(result.lateness_ms, default=0.0),
            "starved": result.starved_ticks,
            "failure": result.failure,
        }
    )


# -- lerobot ---------------------------------------------------------------------------------


def _lerobot_learner(conn: Connection, actor: Connection, rounds: int) -> None:
    lower_priority()  # the same treatment as ours
    import torch.multiprocessing as tmp
    from lerobot.rl.learner_service import LearnerService
    from lerobot.transport.utils import state_to_bytes

    from robotrl.bench.transport import serve_lerobot_learner

    policy = make_policy(0)
    shutdown = threading.Event()
    parameters: Any = tmp.Queue()
    service = LearnerService(shutdown, parameters, 0.0, tmp.Queue(), tmp.Queue())
    server, port = serve_lerobot_learner(service)
    conn.send(f"127.0.0.1:{port}")
    actor.recv()
    times = []
    for i in range(rounds):
        with torch.no_grad():
            policy[i % LAYERS].weight.mul_(0.999)  # type: ignore[operator]
        start = time.monotonic()
        parameters.put(state_to_bytes(policy.state_dict()))  # as its learner's push_actor_policy_to_queue
        if not actor.poll(60):
            raise RuntimeError("lerobot's actor never loaded the weights")
        times.append(actor.recv() - start)
    actor.send("stop")
    shutdown.set()
    conn.send(times)
    server.stop(0)


def _lerobot_actor(conn: Connection, learner: Connection, endpoint: str) -> None:
    import grpc
    import torch.multiprocessing as tmp
    from lerobot.rl.queue import get_last_item_from_queue
    from lerobot.transport import services_pb2, services_pb2_grpc
    from lerobot.transport.utils import bytes_to_state_dict, grpc_channel_options, receive_bytes_in_chunks

    policy = make_policy(1)
    parameters: Any = tmp.Queue()
    shutdown = threading.Event()
    channel = grpc.insecure_channel(endpoint, grpc_channel_options())
    stub = services_pb2_grpc.LearnerServiceStub(channel)
    stub.Ready(services_pb2.Empty(), timeout=30)

    def receive() -> None:  # its receive_policy thread
        with contextlib.suppress(grpc.RpcError):  # the learner stopped
            receive_bytes_in_chunks(stub.StreamParameters(services_pb2.Empty()), parameters, shutdown)

    threading.Thread(target=receive, daemon=True).start()
    learner.send("ready")
    loaded = 0
    while not shutdown.is_set():
        blob = get_last_item_from_queue(parameters, block=True, timeout=0.1)
        if blob is None:
            if learner.poll(0):
                break
            continue
        policy.load_state_dict(bytes_to_state_dict(blob))  # its update_policy_parameters
        learner.send(time.monotonic())
        loaded += 1
    shutdown.set()
    conn.send({"loaded": loaded})
    channel.close()


# -- driver ----------------------------------------------------------------------------------


def _run_pair(learner_fn: Any, actor_fn: Any, rounds: int) -> tuple[list[Any], dict[str, Any]]:
    """What the learner measured per publication, and the actor's loop figures."""
    ctx = mp.get_context("spawn")
    l_conn, l_child = ctx.Pipe()
    a_conn, a_child = ctx.Pipe()
    l_link, a_link = ctx.Pipe()
    learner = ctx.Process(target=learner_fn, args=(l_child, l_link, rounds), daemon=True)
    learner.start()
    actor = None
    try:
        if not l_conn.poll(120):
            raise RuntimeError("learner did not start")
        endpoint = l_conn.recv()
        actor = ctx.Process(target=actor_fn, args=(a_child, a_link, endpoint))  # it may have a child
        actor.start()
        if not l_conn.poll(600):
            raise RuntimeError("no result from the learner")
        latencies = l_conn.recv()
        if not a_conn.poll(60):
            raise RuntimeError("no result from the actor")
        actor_stats = a_conn.recv()
    finally:
        for proc in (learner, actor):
            if proc is not None:
                proc.join(10)
                if proc.is_alive():
                    proc.kill()
    return latencies, actor_stats


PATHS = {"shm": "one host: shared memory", "socket": "over the socket: pieces, as from another host"}
"""The two weight paths measured, by the prefix of their figures in the JSON line."""


PARTS = ("publish_call", "publish_to_installed", "publish_to_active", "publish_to_acting")
"""The figures of each publication, in the order :func:`_learner` measures them."""


def _path_figures(path: str, measured: list[tuple[float, ...]]) -> dict[str, Any]:
    """Percentiles of one path's publications after warm-up, in ms, under ``path``'s prefix."""
    out: dict[str, Any] = {
        f"{path}_warmup_publish_to_active_ms": [round(m[2] * 1000) for m in measured[:WARMUP]]
    }
    for index, part in enumerate(PARTS):
        ms = [m[index] * 1000 for m in measured[WARMUP:]]
        out[f"{path}_{part}_ms_p50"] = round(_percentile(ms, 0.5), 1)
        out[f"{path}_{part}_ms_p99"] = round(_percentile(ms, 0.99), 1)
    return out


def inference_ms(repeats: int = 10) -> float:
    """The median time of one chunk of the stack on one thread, as the worker runs it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        policy, observation = StackPolicy(), Observation(tick=0, state=np.zeros(6, np.float32))
        times = []
        for _ in range(repeats + 1):  # the first warms up
            start = time.perf_counter()
            policy.infer(observation, None, 0)
            times.append(time.perf_counter() - start)
        return statistics.median(times[1:]) * 1000
    finally:
        torch.set_num_threads(threads)


SWAPS = 100
"""Measured swaps per path in a full run: with fewer than 100 a p99 is the single worst swap
(30 swaps: one slow publication among them decided the figure)."""


def run(quick: bool = False) -> dict[str, Any]:
    rounds = 8 if quick else SWAPS
    figures: dict[str, Any] = {"inference_ms": round(inference_ms(), 1)}
    loops = {}
    for path in PATHS:
        measured, loops[path] = _run_pair(
            functools.partial(_learner, shared_memory=path == "shm"), _actor, rounds
        )
        figures.update(_path_figures(path, measured))
    theirs, _ = _run_pair(_lerobot_learner, _lerobot_actor, 4 if quick else 10)
    theirs_ms = [s * 1000 for s in theirs]
    le_p50 = statistics.median(theirs_ms)
    weaker = {  # the headline: the slower path at each figure
        key: max(figures[f"{path}_{key}"] for path in PATHS)
        for key in (
            "publish_to_installed_ms_p50",
            "publish_to_installed_ms_p99",
            "publish_to_active_ms_p50",
            "publish_to_active_ms_p99",
            "publish_to_acting_ms_p50",
            "publish_to_acting_ms_p99",
        )
    }
    result = {
        "bench": "hotswap",
        **weaker,
        "missed_deadlines": sum(loop["missed"] for loop in loops.values()),
        "starved_ticks": sum(loop["starved"] for loop in loops.values()),
        "lerobot_push_ms_p50": round(le_p50, 1),
        "speedup_vs_lerobot": round(le_p50 / weaker["publish_to_active_ms_p50"], 1),
        "control_ticks": sum(loop["ticks"] for loop in loops.values()),
        "worst_tick_late_ms": round(max(loop["worst_late_ms"] for loop in loops.values()), 1),
        "swaps": rounds,
        **figures,
    }
    rows = []
    for path, what in PATHS.items():
        loop = loops[path]
        for part in PARTS:
            missed = f"{loop['missed']} of {loop['ticks']} ticks" if part == "publish_to_acting" else "-"
            label = part.replace("_", " ").replace("active", "first new chunk")
            label = label.replace("acting", "first action of it")
            rows.append(
                [
                    f"{what}: {label}",
                    rounds,
                    figures[f"{path}_{part}_ms_p50"],
                    figures[f"{path}_{part}_ms_p99"],
                    missed,
                ]
            )
    rows.append(["lerobot", len(theirs), le_p50, _percentile(theirs_ms, 0.99), "(loads at episode end)"])
    report(
        f"hotswap: 50.3M float32 parameters, learner process -> actor process at {CONTROL_HZ:.0f} Hz "
        f"({'quick' if quick else 'full'} run)",
        ["path", "swaps", "p50 ms", "p99 ms", "missed deadlines"],
        rows,
        result,
    )
    return result
