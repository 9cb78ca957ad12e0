"""`robotrl bench actor`: our actor against lerobot's asynchronous inference, same arm, same policy.

Both drive the simulated SO-101 (reach task, one 96x96 camera) in wall-clock time at each
of :data:`RATES` with the same ACT policy (random weights, built offline), whose inference
is held to at least three control periods: lerobot's policy server by its own
``inference_latency`` setting, ours by a padding wrapper in the inference worker. Our
actor also receives new weights every 2 s through the real weight link and swaps them
between inferences; lerobot's client has no way to take new weights while it runs. A
learner runs update groups on the same cores the whole time (:func:`_busy_learner`), as it
does beside an actor on a small host.

Both are measured the same way, from a real timestamp per control tick (ours when the
tick's command has gone out, after the step; lerobot's client at the start of its tick):
``ticks_lost`` (ticks the rate's clock would have run minus ticks run), interval jitter
(``|interval - dt|``, p50, p99 and max), starved ticks (a tick with no action to send,
after the first action arrived) and the garbage collections seen in the control loop's
process (count and longest pause). Our loop's own deadline accounting (a period skipped, or
a command sent after its period ended) and its wake-up lateness are reported too. Our actor
runs twice, as configured by default and with ``actor.realtime_priority`` =
:data:`REALTIME_PRIORITY`. 60 s per side and rate (15 s with ``--quick``).

Beside them, the machine's floor (:func:`run_bare_loop`): the loop's own wait at the same
rate and priority with nothing in its ticks, beside the same learner; and for every side the
CPU time the hypervisor stole meanwhile (``steal_ms``). On a virtual machine a vCPU can stop
for tens of milliseconds whatever its thread's priority, so each stall of a loop (an interval
over 1.5 periods) is checked against the steal counter read at every tick: ``stalls`` and
``stalls_without_steal``, the ones the machine does not explain.
"""

from __future__ import annotations

import contextlib
import gc
import math
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from robotrl.bench.report import report
from robotrl.core.types import FloatArray, Observation

RATES = (100.0, 200.0)
"""Control rates measured, Hz."""
INFER_PERIODS = 3
"""Inference is held to at least this many control periods."""
HORIZON = 50
JOINTS = 6
IMAGE = 96
TASK = "robotrl/SO101Reach-v0"


def build_act(out: Path) -> Path:
    """An ACT policy with random weights for the sim arm's joints and front camera, saved the lerobot way."""
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    torch.manual_seed(0)
    config = ACTConfig(
        input_features={
            "observation.state": PolicyFeature(FeatureType.STATE, (JOINTS,)),
            "observation.images.front": PolicyFeature(FeatureType.VISUAL, (3, IMAGE, IMAGE)),
        },
        output_features={"action": PolicyFeature(FeatureType.ACTION, (JOINTS,))},
        chunk_size=HORIZON,
        n_action_steps=HORIZON,
        pretrained_backbone_weights=None,
        device="cpu",
    )
    stats = {
        "observation.state": {"mean": torch.zeros(JOINTS), "std": torch.full((JOINTS,), 30.0)},
        "action": {"mean": torch.zeros(JOINTS), "std": torch.full((JOINTS,), 30.0)},
        "observation.images.front": {"mean": torch.full((3, 1, 1), 0.5), "std": torch.full((3, 1, 1), 0.25)},
    }
    policy = ACTPolicy(config)
    pre, post = make_pre_post_processors(config, dataset_stats=stats)
    for part in (policy, pre, post):
        part.save_pretrained(out)
    return out


class PaddedPolicy:
    """ACT fed joint positions only (as lerobot's client feeds it), with a minimum inference time."""

    def __init__(self, inner: Any, min_infer_s: float) -> None:
        self.inner = inner
        self.min_infer_s = min_infer_s

    @property
    def horizon(self) -> int:
        return int(self.inner.horizon)

    @property
    def action_dim(self) -> int:
        return int(self.inner.action_dim)

    def infer(self, observation: Observation, prefix: FloatArray | None, delay: int) -> FloatArray:
        start = time.perf_counter()
        obs = Observation(
            observation.tick,
            observation.state[:JOINTS],
            {"front": observation.images["front"]},
            observation.instruction,
            observation.timestamp,
        )
        chunk: FloatArray = self.inner.infer(obs, prefix, delay)
        left = self.min_infer_s - (time.perf_counter() - start)
        if left > 0:
            time.sleep(left)
        return chunk

    def per_sample_loss(self, batch: Mapping[str, Any]) -> Any:
        return self.inner.per_sample_loss(batch)

    def trainable_tensors(self) -> Mapping[str, npt.NDArray[np.generic]]:
        tensors: Mapping[str, npt.NDArray[np.generic]] = self.inner.trainable_tensors()
        return tensors

    def load_weights(
        self, tensors: Mapping[str, npt.NDArray[np.generic]], *, zero_copy: bool = False
    ) -> None:
        self.inner.load_weights(tensors, zero_copy=zero_copy)


def padded_act(path: str, min_infer_s: float) -> PaddedPolicy:
    """Worker-side factory (named in the WorkerSpec)."""
    from robotrl.policy.lerobot import LerobotChunkPolicy

    return PaddedPolicy(LerobotChunkPolicy.load(path, device="cpu"), min_infer_s)


def interval_stats(times: npt.NDArray[np.float64], dt: float) -> dict[str, Any]:
    """Ticks lost against an ideal clock, and interval jitter, from tick start times."""
    if len(times) < 2:
        return {
            "ticks_lost": 0,
            "interval_jitter_p50_ms": 0.0,
            "interval_jitter_p99_ms": 0.0,
            "interval_jitter_max_ms": 0.0,
        }
    intervals = np.diff(times)
    expected = round((times[-1] - times[0]) / dt) + 1
    jitter = np.abs(intervals - dt) * 1e3
    return {
        "ticks_lost": max(expected - len(times), 0),
        "interval_jitter_p50_ms": float(np.quantile(jitter, 0.5)),
        "interval_jitter_p99_ms": float(np.quantile(jitter, 0.99)),
        "interval_jitter_max_ms": float(jitter.max()),
    }


@contextmanager
def gc_pauses() -> Iterator[list[tuple[float, float]]]:
    """(start, duration) in seconds of every garbage collection this process runs inside the block."""
    pauses: list[tuple[float, float]] = []
    started = [0.0]

    def on_gc(phase: str, _info: Mapping[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses.append((started[0], time.perf_counter() - started[0]))

    gc.callbacks.append(on_gc)
    try:
        yield pauses
    finally:
        gc.callbacks.remove(on_gc)


def gc_stats(pauses: list[tuple[float, float]], since: float) -> dict[str, Any]:
    """Collections from the first control tick on (start-up's deliberate collection is not one)."""
    seen = [duration for start, duration in pauses if start >= since]
    return {"gc_collections": len(seen), "gc_max_pause_ms": max(seen, default=0.0) * 1e3}


def steal_jiffies() -> int:
    """The hypervisor's steal counter: clock ticks it took from this virtual machine's CPUs so
    far (``steal`` in /proc/stat; about 20 µs to read, so once a control tick is affordable);
    -1 where the kernel does not say (not Linux)."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()
    except OSError:
        return -1
    return int(fields[8]) if len(fields) > 8 else -1


def steal_ms(jiffies: int) -> float:
    """``steal_jiffies`` in ms (NaN for -1)."""
    return jiffies * 1000 / os.sysconf("SC_CLK_TCK") if jiffies >= 0 else math.nan


def stall_stats(times: npt.NDArray[np.float64], steals: npt.NDArray[np.int64], dt: float) -> dict[str, Any]:
    """Stalls (intervals between tick stamps of more than 1.5 periods: a tick half a period late
    or more) and how many of them saw no CPU stolen by the hypervisor (``steals``: the steal
    counter at each stamp); without the counter, every stall counts as unexplained."""
    stalled = np.nonzero(np.diff(times) > 1.5 * dt)[0]
    known = len(steals) == len(times) and steals.min(initial=0) >= 0
    stolen = int(np.count_nonzero(np.diff(steals)[stalled] > 0)) if known else 0
    return {"stalls": len(stalled), "stalls_without_steal": len(stalled) - stolen}


def run_bare_loop(hz: float, seconds: float, priority: int) -> dict[str, Any]:
    """The machine's floor: the control loop's own wait (``MonotonicClock.sleep_until`` to
    absolute deadlines, whole periods lost counted and the schedule re-anchored as
    :class:`~robotrl.actor.loop.ControlLoop` does) at ``hz`` and SCHED_FIFO ``priority``, with no
    work in its ticks. What it misses, no loop on this machine can keep: on a virtual machine
    the hypervisor can stop a vCPU whatever its thread's priority (see ``steal_ms``)."""
    from robotrl.actor.realtime import realtime_thread
    from robotrl.core.clock import MonotonicClock

    clock, dt = MonotonicClock(), 1.0 / hz
    times = np.empty(int(seconds * hz))
    steals = np.empty(len(times), np.int64)
    missed = 0
    with realtime_thread(priority):
        t0 = clock.now()
        for k in range(len(times)):
            deadline = t0 + k * dt
            clock.sleep_until(deadline)
            times[k] = now = clock.now()
            steals[k] = steal_jiffies()  # the same work a tick of TickTimes does
            if now - deadline >= dt:
                lost = int((now - deadline) // dt)
                missed += lost
                t0 += lost * dt
    return {
        **interval_stats(times, dt),
        **stall_stats(times, steals, dt),
        "ticks": len(times),
        "missed_deadlines": missed,
    }


class TickTimes:
    """A loop observer that stamps every control tick when its command has gone out (the loop
    calls it after the step): real times, so a skipped period shows as one, and the
    hypervisor's steal counter, so a stall can be told from CPU time the machine lost."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.steals: list[int] = []

    def on_tick(self, *_: object) -> None:
        self.times.append(time.perf_counter())
        self.steals.append(steal_jiffies())

    def on_chunk(self, *_: object) -> None:
        pass

    def close(self) -> None:
        pass


# -- the load: a learner and its weights -------------------------------------------------


def _busy_learner(stop: Any, ready: Any, updates: Any) -> None:
    """In a child process: `robotrl bench learner`'s learner (small policy, batch 256, a critic
    reading two cameras) running update groups until ``stop``, with the library's default threads."""
    from robotrl.bench import learner as bench
    from robotrl.learner.main import build_learner
    from robotrl.policy import build_policy
    from robotrl.transport.inproc import DroppedWeights, TransitionQueue

    cfg = bench.bench_config(quick=True)
    spec = bench.bench_spec()
    with tempfile.TemporaryDirectory(prefix="robotrl-bench-actor-learner-") as tmp:
        cfg.run_dir = tmp
        learner = build_learner(
            cfg, build_policy(cfg.policy, spec), spec, TransitionQueue(maxsize=8), DroppedWeights(), False
        )
        stream = bench.Stream(np.random.default_rng(0))
        for _ in range(8):
            learner.ingest(stream.next())
        per_group = cfg.learner.rapi.critic_updates_per_group + cfg.learner.actor_updates_per_group
        ready.set()
        while not stop.is_set():
            learner.algorithm.update_group(learner.next_batch)
            with updates.get_lock():
                updates.value += per_group
        learner.online.close()
        learner.anchor.close()


def _learner_publishing(act_dir: str, endpoint: str, stop: Any) -> None:
    """In a child process, like a learner: the policy's trainable tensors as a new version every 2 s."""
    from robotrl.policy.lerobot import LerobotChunkPolicy
    from robotrl.transport.weights import WeightPublisher

    tensors = LerobotChunkPolicy.load(act_dir, device="cpu").trainable_tensors()
    publisher = WeightPublisher(endpoint)
    try:
        while not stop.wait(2.0):
            publisher.publish(tensors, "trainable")
    finally:
        publisher.close()


class BusyLearner:
    """The learner process of :func:`_busy_learner`, started and stopped around a measurement."""

    def __init__(self) -> None:
        ctx = mp.get_context("spawn")
        self._stop, self._ready = ctx.Event(), ctx.Event()
        self._updates = ctx.Value("q", 0)
        self._process = ctx.Process(
            target=_busy_learner, args=(self._stop, self._ready, self._updates), daemon=True
        )

    def __enter__(self) -> BusyLearner:
        self._process.start()
        deadline = time.monotonic() + 300
        while not self._ready.wait(timeout=0.5):
            if not self._process.is_alive():
                raise RuntimeError(
                    f"the busy learner exited with code {self._process.exitcode} before updating"
                )
            if time.monotonic() > deadline:
                self._process.kill()
                raise RuntimeError("the busy learner did not start its updates within 300 s")
        return self

    @property
    def updates(self) -> int:
        return int(self._updates.value)

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._process.join(timeout=60)
        if self._process.is_alive():
            self._process.kill()


# -- ours -------------------------------------------------------------------------------


def run_ours(
    act_dir: Path, hz: float, seconds: float, workdir: Path, realtime_priority: int = 0
) -> dict[str, Any]:
    """Our actor for ``seconds``; its loop's thread at SCHED_FIFO ``realtime_priority`` (0: normal)
    and its worker's one below, as ``actor.realtime_priority`` runs them. Raises RealtimeError
    where that is not permitted, before anything starts."""
    from robotrl.actor.compose import build_loop, worker_priority
    from robotrl.actor.realtime import check_realtime, realtime_thread
    from robotrl.actor.worker import ProcessInference, WorkerSpec
    from robotrl.config.actor import ActorConfig, Strategy
    from robotrl.config.env import EnvConfig
    from robotrl.sim import make_env

    check_realtime(realtime_priority)
    ticks = int(seconds * hz)
    endpoint = f"ipc://{workdir}/weights-{hz:g}.sock"
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    learner = ctx.Process(target=_learner_publishing, args=(str(act_dir), endpoint, stop), daemon=True)
    learner.start()
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(learner.join, timeout=10)
        cleanup.callback(stop.set)
        env = make_env(
            EnvConfig(id=TASK, control_hz=hz, max_episode_ticks=ticks, cameras=["front"], image_size=IMAGE)
        )
        cleanup.callback(env.close)
        spec = WorkerSpec(
            "robotrl.bench.actor:padded_act",
            {"path": str(act_dir), "min_infer_s": INFER_PERIODS / hz},
            weights_factory="robotrl.actor.compose:subscriber_for_worker",
            weights_kwargs={
                "transport": {"weights_endpoint": endpoint, "transitions_endpoint": f"ipc://{workdir}/t"},
                "actor_id": "bench",
            },
            weights_layout=True,
            torch_threads=1,
            realtime_priority=worker_priority(realtime_priority),
        )
        backend = ProcessInference(spec)
        cleanup.callback(backend.close)
        cfg = ActorConfig(strategy=Strategy.prefix, virtual_time=False)
        ticks_seen = TickTimes()
        loop = build_loop(
            env, backend, cfg, backend.info.horizon, latency=None, max_prefix=HORIZON - 1, observer=ticks_seen
        )
        with realtime_thread(realtime_priority), gc_pauses() as pauses:
            result = loop.run_episode(0, seed=0)
    times = np.array(ticks_seen.times)
    lateness_ms = np.array(result.lateness_ms)
    out = interval_stats(times, 1.0 / hz)
    out.update(stall_stats(times, np.array(ticks_seen.steals, np.int64), 1.0 / hz))
    out.update(gc_stats(pauses, times[0] if len(times) else math.inf))
    out.update(
        ticks=result.ticks,
        missed_deadlines=result.missed_deadlines,
        lateness_p99_ms=float(np.quantile(lateness_ms, 0.99)) if len(lateness_ms) else 0.0,
        starved_ticks=result.starved_ticks,
        versions_run=sorted(set(result.policy_versions)),
        mean_delay_ticks=float(np.mean(result.delays[1:])) if len(result.delays) > 1 else 0.0,
        failure=result.failure,
    )
    return out


# -- lerobot ----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


_SERVER = """
import logging, sys
from lerobot.async_inference.configs import PolicyServerConfig
from lerobot.async_inference.policy_server import serve
logging.basicConfig(level=logging.WARNING)
serve(PolicyServerConfig(host="127.0.0.1", port=int(sys.argv[1]), fps=int(sys.argv[2]),
                         inference_latency=float(sys.argv[3])))
"""


def _lerobot_client(act_dir: str, port: int, hz: float, seconds: float, out: Any, workdir: str) -> None:
    """In a child process: lerobot's RobotClient driving the sim robot, its ticks timestamped."""
    import logging

    os.chdir(workdir)  # lerobot writes its log files into the working directory

    from lerobot.async_inference.configs import RobotClientConfig
    from lerobot.async_inference.robot_client import RobotClient

    import robotrl.sim  # noqa: F401 - picks the GL backend before mujoco loads
    from robotrl.sim.config_so101_sim import SO101SimConfig

    logging.disable(logging.WARNING)
    ticks: list[tuple[float, bool]] = []

    class TimedClient(RobotClient):  # type: ignore[misc]
        def actions_available(self) -> bool:
            available: bool = super().actions_available()
            ticks.append((time.perf_counter(), available))  # called once at the start of every loop tick
            return available

    robot = SO101SimConfig(task=TASK, sim_cameras=["front"], image_size=IMAGE, control_hz=hz)
    cfg = RobotClientConfig(
        policy_type="act",
        pretrained_name_or_path=act_dir,
        robot=robot,
        actions_per_chunk=HORIZON,
        task="reach",
        server_address=f"127.0.0.1:{port}",
        fps=int(hz),
    )
    client = TimedClient(cfg)
    if not client.start():
        out.put({"error": "lerobot client could not reach its policy server"})
        return
    receiver = threading.Thread(target=client.receive_actions, daemon=True)
    receiver.start()
    threading.Timer(seconds, client.shutdown_event.set).start()
    try:
        with gc_pauses() as pauses:
            client.control_loop(task="reach")
    finally:
        client.stop()
    out.put({"ticks": ticks, "gc_pauses": pauses})


def _port_open(port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.1)
    return False


def _result_of(client: Any, queue: Any, timeout_s: float) -> dict[str, Any]:
    """What the client process put on ``queue``, or an error as soon as it died without a word."""
    import queue as queues

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            got: dict[str, Any] = queue.get(timeout=1.0)
            return got
        except queues.Empty:
            if not client.is_alive():
                return {"error": f"lerobot's client exited with code {client.exitcode} without a result"}
    return {"error": f"no result from lerobot's client within {timeout_s:.0f} s"}


def run_lerobot(act_dir: Path, hz: float, seconds: float, workdir: Path) -> dict[str, Any]:
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # the same one inference thread our worker gets
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVER, str(port), str(int(hz)), str(INFER_PERIODS / hz)],
        env=env,
        cwd=workdir,  # lerobot writes its log files into the working directory
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    client = ctx.Process(target=_lerobot_client, args=(str(act_dir), port, hz, seconds, queue, str(workdir)))
    try:
        if not _port_open(port, timeout_s=30):
            return {"error": f"lerobot's policy server did not listen on port {port} within 30 s"}
        client.start()
        got = _result_of(client, queue, timeout_s=seconds + 180)
    finally:
        if client.is_alive():
            client.terminate()
        if client.pid is not None:
            client.join(timeout=30)
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    if "error" in got:
        return {"error": got["error"]}
    times = np.array([t for t, _ in got["ticks"]])
    available = [a for _, a in got["ticks"]]
    first = available.index(True) if True in available else len(available)
    out = interval_stats(times, 1.0 / hz)
    out.update(gc_stats(got["gc_pauses"], times[0] if len(times) else math.inf))
    out.update(ticks=len(times), starved_ticks=available[first:].count(False))
    return out


SIDES = ("robotrl", "robotrl_realtime", "lerobot", "bare_loop")
"""The columns: our actor as configured by default, with ``actor.realtime_priority`` =
:data:`REALTIME_PRIORITY`, lerobot's async inference, and the machine's floor
(:func:`run_bare_loop` at the same priority)."""
REALTIME_PRIORITY = 50


def _rows(hz: float, sides: Mapping[str, Mapping[str, Any]]) -> list[list[Any]]:
    def row(label: str, key: str) -> list[Any]:
        values = [sides[side].get(key, "-") for side in SIDES]
        return [f"{hz:g} Hz {label}", *(round(v, 3) if isinstance(v, float) else v for v in values)]

    return [
        row("ticks run", "ticks"),
        row("ticks lost (vs the rate's clock)", "ticks_lost"),
        row("missed deadlines (our loop's count)", "missed_deadlines"),
        row("interval jitter p50 (ms)", "interval_jitter_p50_ms"),
        row("interval jitter p99 (ms)", "interval_jitter_p99_ms"),
        row("interval jitter max (ms)", "interval_jitter_max_ms"),
        row("lateness p99 (ms)", "lateness_p99_ms"),
        row("starved ticks after warm-up", "starved_ticks"),
        row("gc collections in the loop's process", "gc_collections"),
        row("longest gc pause (ms)", "gc_max_pause_ms"),
        row("weight swaps (every 2 s)", "swaps"),
        row("CPU stolen by the hypervisor (ms)", "steal_ms"),
        row("stalls (an interval over 1.5 periods)", "stalls"),
        row("stalls with no CPU stolen", "stalls_without_steal"),
    ]


def _summary(side: Mapping[str, Any]) -> dict[str, Any]:
    """One side's figures for the JSON line. Missed deadlines: our loop's own count (a period
    skipped, or a command sent after its period ended); lerobot's ticks lost."""
    keys = {
        "interval_jitter_p50_ms": "jitter_p50_ms",
        "interval_jitter_p99_ms": "jitter_p99_ms",
        "interval_jitter_max_ms": "jitter_max_ms",
        "lateness_p99_ms": "lateness_p99_ms",
        "starved_ticks": "starved_ticks",
        "gc_collections": "gc_collections",
        "gc_max_pause_ms": "gc_max_pause_ms",
        "swaps": "swaps",
        "steal_ms": "steal_ms",
        "stalls": "stalls",
        "stalls_without_steal": "stalls_without_steal",
        "error": "error",
    }
    out = {name: side[key] for key, name in keys.items() if key in side}
    if "ticks_lost" in side:  # lerobot's count, and ours from the same timestamps
        out["ticks_lost"] = side["ticks_lost"]
        out["missed_deadlines"] = side.get("missed_deadlines", side["ticks_lost"])
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}


def _ours(act_dir: Path, hz: float, seconds: float, workdir: Path, priority: int) -> dict[str, Any]:
    from robotrl.actor.realtime import RealtimeError

    try:
        ours = run_ours(act_dir, hz, seconds, workdir, priority)
    except RealtimeError as exc:
        return {"error": str(exc)}
    ours["swaps"] = len(ours["versions_run"]) - 1
    if ours["failure"]:
        ours["error"] = ours["failure"]
    return ours


def _bare(hz: float, seconds: float, priority: int) -> dict[str, Any]:
    from robotrl.actor.realtime import RealtimeError

    try:
        return run_bare_loop(hz, seconds, priority)
    except RealtimeError as exc:
        return {"error": str(exc)}


def _stolen(side: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """``side(*args)``'s figures with the CPU time the hypervisor stole while it ran."""
    before = steal_jiffies()
    figures = side(*args)
    return {**figures, "steal_ms": steal_ms(steal_jiffies() - before) if before >= 0 else math.nan}


def run(quick: bool = False) -> dict[str, Any]:
    seconds = 15.0 if quick else 60.0
    rows: list[list[Any]] = []
    result: dict[str, Any] = {"bench": "actor", "seconds": seconds}
    errors: list[str] = []
    with tempfile.TemporaryDirectory(prefix="robotrl-bench-actor-") as tmp, BusyLearner() as learner:
        workdir = Path(tmp)
        act_dir = build_act(workdir / "act")
        start, updates = time.perf_counter(), learner.updates
        for hz in RATES:
            sides = {
                "robotrl": _stolen(_ours, act_dir, hz, seconds, workdir, 0),
                "robotrl_realtime": _stolen(_ours, act_dir, hz, seconds, workdir, REALTIME_PRIORITY),
                "lerobot": {**_stolen(run_lerobot, act_dir, hz, seconds, workdir), "swaps": "not supported"},
                "bare_loop": _stolen(_bare, hz, seconds, REALTIME_PRIORITY),
            }
            rows += _rows(hz, sides)
            result[f"hz_{hz:g}"] = {side: _summary(figures) for side, figures in sides.items()}
            errors += [f"{hz:g} Hz {side}: {f['error']}" for side, f in sides.items() if "error" in f]
        learner_rate = (learner.updates - updates) / (time.perf_counter() - start)
    result["learner_updates_per_s"] = round(learner_rate, 2)
    if errors:
        result["errors"] = errors
    rates = ", ".join(f"{hz:g}" for hz in RATES)
    report(
        f"actor: {rates} Hz wall clock, ACT held to >= {INFER_PERIODS} periods of inference, "
        f"swaps every 2 s, a learner updating on the same cores ({learner_rate:.2f} updates/s), "
        f"{seconds:.0f} s per side and rate",
        [
            "metric",
            "robotrl",
            f"robotrl, SCHED_FIFO {REALTIME_PRIORITY}",
            "lerobot async inference",
            "bare loop (the machine's floor)",
        ],
        rows,
        result,
    )
    return result
