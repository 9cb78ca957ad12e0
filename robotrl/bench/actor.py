"""`robotrl bench actor`: our actor against lerobot's asynchronous inference, same arm, same policy.

Both drive the simulated SO-101 (reach task, one 96x96 camera) at 50 Hz in wall-clock
time with the same ACT policy (random weights, built offline), whose inference is held
to at least three control periods (60 ms): lerobot's policy server by its own
``inference_latency`` setting, ours by a padding wrapper in the inference worker. Our
actor also receives new weights every 2 s through the real weight link and swaps them
between inferences; lerobot's client has no way to take new weights while it runs.

Both are measured the same way, from the timestamps of their control ticks:
``ticks_lost`` (ticks a 50 Hz clock would have run minus ticks run), interval jitter
(``|interval - dt|``, p50 and p99), and starved ticks (a tick with no action to
send, after the first action arrived). Our loop's own deadline accounting is
reported too. 60 s each (15 s with ``--quick``).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from robotrl.bench.report import report
from robotrl.core.types import FloatArray, Observation

HZ = 50.0
MIN_INFER_S = 3 / HZ
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
        return {"ticks_lost": 0, "interval_jitter_p50_ms": 0.0, "interval_jitter_p99_ms": 0.0}
    intervals = np.diff(times)
    expected = round((times[-1] - times[0]) / dt) + 1
    jitter = np.abs(intervals - dt) * 1e3
    return {
        "ticks_lost": max(expected - len(times), 0),
        "interval_jitter_p50_ms": float(np.quantile(jitter, 0.5)),
        "interval_jitter_p99_ms": float(np.quantile(jitter, 0.99)),
    }


# -- ours -------------------------------------------------------------------------------


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


def run_ours(act_dir: Path, seconds: float, workdir: Path) -> dict[str, Any]:
    from robotrl.actor.compose import build_loop
    from robotrl.actor.worker import ProcessInference, WorkerSpec
    from robotrl.config.actor import ActorConfig, Strategy
    from robotrl.config.env import EnvConfig
    from robotrl.sim import make_env

    ticks = int(seconds * HZ)
    env = make_env(
        EnvConfig(id=TASK, control_hz=HZ, max_episode_ticks=ticks, cameras=["front"], image_size=IMAGE)
    )
    endpoint = f"ipc://{workdir}/weights.sock"
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    learner = ctx.Process(target=_learner_publishing, args=(str(act_dir), endpoint, stop), daemon=True)
    learner.start()
    spec = WorkerSpec(
        "robotrl.bench.actor:padded_act",
        {"path": str(act_dir), "min_infer_s": MIN_INFER_S},
        weights_factory="robotrl.actor.compose:subscriber_for_worker",
        weights_kwargs={
            "transport": {"weights_endpoint": endpoint, "transitions_endpoint": f"ipc://{workdir}/t"},
            "actor_id": "bench",
        },
        weights_layout=True,
        torch_threads=1,
    )
    backend = ProcessInference(spec)
    cfg = ActorConfig(strategy=Strategy.prefix, virtual_time=False)
    loop = build_loop(env, backend, cfg, backend.info.horizon, latency=None, max_prefix=HORIZON - 1)
    try:
        result = loop.run_episode(0, seed=0)
    finally:
        stop.set()
        backend.close()
        learner.join(timeout=10)
        env.close()
    dt = 1.0 / HZ
    lateness = np.array(result.lateness_ms) / 1e3
    starts = np.arange(len(lateness)) * dt + lateness  # tick start times on the loop's own clock
    out = interval_stats(starts, dt)
    out.update(
        ticks=result.ticks,
        missed_deadlines=result.missed_deadlines,
        lateness_p99_ms=float(np.quantile(lateness * 1e3, 0.99)) if len(lateness) else 0.0,
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


def _lerobot_client(act_dir: str, port: int, seconds: float, out: Any, workdir: str) -> None:
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

    robot = SO101SimConfig(task=TASK, sim_cameras=["front"], image_size=IMAGE, control_hz=HZ)
    cfg = RobotClientConfig(
        policy_type="act",
        pretrained_name_or_path=act_dir,
        robot=robot,
        actions_per_chunk=HORIZON,
        task="reach",
        server_address=f"127.0.0.1:{port}",
        fps=int(HZ),
    )
    client = TimedClient(cfg)
    if not client.start():
        out.put({"error": "lerobot client could not reach its policy server"})
        return
    receiver = threading.Thread(target=client.receive_actions, daemon=True)
    receiver.start()
    threading.Timer(seconds, client.shutdown_event.set).start()
    try:
        client.control_loop(task="reach")
    finally:
        client.stop()
    out.put({"ticks": ticks})


def run_lerobot(act_dir: Path, seconds: float, workdir: Path) -> dict[str, Any]:
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # the same one inference thread our worker gets
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVER, str(port), str(int(HZ)), str(MIN_INFER_S)],
        env=env,
        cwd=workdir,  # lerobot writes its log files into the working directory
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        client = ctx.Process(target=_lerobot_client, args=(str(act_dir), port, seconds, queue, str(workdir)))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # wait for the server's port
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        client.start()
        got = queue.get(timeout=seconds + 180)
        client.join(timeout=30)
    finally:
        server.terminate()
        server.wait(timeout=10)
    if "error" in got:
        return {"error": got["error"]}
    times = np.array([t for t, _ in got["ticks"]])
    available = [a for _, a in got["ticks"]]
    first = available.index(True) if True in available else len(available)
    out = interval_stats(times, 1.0 / HZ)
    out.update(ticks=len(times), starved_ticks=available[first:].count(False))
    return out


def run(quick: bool = False) -> dict[str, Any]:
    seconds = 15.0 if quick else 60.0
    with tempfile.TemporaryDirectory(prefix="robotrl-bench-actor-") as tmp:
        workdir = Path(tmp)
        act_dir = build_act(workdir / "act")
        ours = run_ours(act_dir, seconds, workdir)
        theirs = run_lerobot(act_dir, seconds, workdir)
    rows = [
        ["ticks run", ours["ticks"], theirs.get("ticks", "-")],
        ["ticks lost (vs a 50 Hz clock)", ours["ticks_lost"], theirs.get("ticks_lost", "-")],
        [
            "interval jitter p50 (ms)",
            round(ours["interval_jitter_p50_ms"], 3),
            round(theirs.get("interval_jitter_p50_ms", 0), 3),
        ],
        [
            "interval jitter p99 (ms)",
            round(ours["interval_jitter_p99_ms"], 3),
            round(theirs.get("interval_jitter_p99_ms", 0), 3),
        ],
        ["starved ticks after warm-up", ours["starved_ticks"], theirs.get("starved_ticks", "-")],
        ["weight swaps (every 2 s)", len(ours["versions_run"]) - 1, "not supported"],
    ]
    result = {
        "bench": "actor",
        "missed_deadlines": ours["ticks_lost"] + ours["missed_deadlines"],
        "jitter_p99_ms": round(ours["interval_jitter_p99_ms"], 3),
        "starved_ticks": ours["starved_ticks"],
        "lerobot_missed_deadlines": theirs.get("ticks_lost"),
        "lerobot_jitter_p99_ms": round(theirs["interval_jitter_p99_ms"], 3)
        if "interval_jitter_p99_ms" in theirs
        else None,
        "lerobot_starved_ticks": theirs.get("starved_ticks"),
        "lateness_p99_ms": round(ours["lateness_p99_ms"], 3),
        "policy_versions": ours["versions_run"],
        "seconds": seconds,
    }
    if ours["failure"] or "error" in theirs:
        result["errors"] = [e for e in (ours["failure"], theirs.get("error")) if e]
    report(
        f"actor: 50 Hz wall clock, ACT held to >= {MIN_INFER_S * 1e3:.0f} ms inference, {seconds:.0f} s each",
        ["metric", "robotrl", "lerobot async inference"],
        rows,
        result,
    )
    return result
