"""`robotrl bench vla`: lerobot's SmolVLA and pi0.5, tiny and full, made offline and run as robotrl runs them.

Each VLA and size is measured for the pick-and-place task with two 96x96 cameras and a 32-action
chunk (`robotrl vla init`'s folder, random weights), its actor's side and its learner's side each
in a spawned process of its own, as in a run (so each peak RSS is its own):

- parameters, total and trainable (both VLAs freeze their VLM and train the action expert), and
  the bytes one weight update ships (the trainable tensors, float32) against the whole model's
  (in its own dtype: full pi0.5 is bfloat16);
- chunk inference on this CPU with a committed 8-row prefix through lerobot's RTC, one torch
  thread per inference as the actor's worker has on 2 cores: p50 and p99;
- hot swap of the trainable subset through the real links: a :class:`WeightPublisher` and a
  :class:`WeightSubscriber` on ipc, a loader thread staging each verified update into the
  spare of :class:`PolicySlots`, and an inference loop swapping between two chunks, as the
  actor's worker does. Timed from ``publish`` to the update staged (installed) and to the end of
  the first chunk computed with it (which includes waiting for the chunk then running);
- learner updates/s at batch 8 (lerobot's ``forward``, backward, AdamW on the trainable
  parameters, pi0.5 with lerobot's gradient checkpointing); a learner that dies (out of
  memory) is reported, not waited for;
- on a machine with CUDA, also chunk times, updates/s (bf16 autocast, as the learner trains
  there) and peak GPU memory (keys ``cuda_*``);
- the time to make and to load the folder, and each side's peak RSS.

There is no baseline in the same run to compare with: these are the VLA's own costs on this
machine. The spare slot shares the active one's frozen parameters, as the actor's do.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import multiprocessing as mp
import resource
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robotrl.bench.report import report

HORIZON = 32
PREFIX = 8
BATCH = 8
CAMERAS = ("front", "wrist")


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def run(quick: bool = False, types: tuple[str, ...] = ("smolvla", "pi05")) -> dict[str, Any]:
    counts = {  # (chunks, swaps, updates) per size
        "tiny": (30, 10, 20) if quick else (100, 30, 100),
        "full": (3, 2, 1) if quick else (10, 5, 3),
    }
    result: dict[str, Any] = {"bench": "vla", "horizon": HORIZON, "batch": BATCH}
    rows = []
    for kind, (size, (chunks, swaps, updates)) in itertools.product(types, counts.items()):
        measured = measure(kind, size, chunks, swaps, updates)
        result.update({f"{kind}_{size}_{key}": value for key, value in measured.items()})
        rows.append(
            [
                f"{kind} {size}",
                f"{measured['params'] / 1e6:.2f}M",
                f"{measured['trainable'] / 1e6:.2f}M",
                f"{measured['update_mb']:.1f} ({measured['update_share']:.0%})",
                f"{measured['chunk_ms_p50']:.0f} / {measured['chunk_ms_p99']:.0f}",
                f"{measured['installed_ms_p50']:.0f} / {measured['installed_ms_p99']:.0f}",
                f"{measured['first_chunk_ms_p50']:.0f} / {measured['first_chunk_ms_p99']:.0f}",
                learner_cell(measured),
                f"{measured['actor_peak_rss_mb']:.0f} / {measured.get('learner_peak_rss_mb', 0):.0f}",
                cuda_cell(measured),
            ]
        )
    report(
        f"vla: SmolVLA and pi0.5 made offline, pick-place, two 96x96 cameras, horizon {HORIZON}; "
        f"ms as p50 / p99, installed and new chunk timed from publish, updates at batch {BATCH} "
        f"({'quick' if quick else 'full'} run)",
        [
            "VLA",
            "params",
            "trainable",
            "update MB",
            "chunk ms",
            "installed ms",
            "new chunk ms",
            "updates/s",
            "RSS MB actor / learner",
            "CUDA chunk ms, updates/s",
        ],
        rows,
        result,
    )
    return result


def cuda_cell(measured: dict[str, Any]) -> str:
    if "cuda_chunk_ms_p50" not in measured:
        return "no CUDA"
    return (
        f"{measured['cuda_chunk_ms_p50']:.0f} / {measured['cuda_chunk_ms_p99']:.0f}, "
        f"{measured['cuda_updates_per_s']:.2f}"
    )


def learner_cell(measured: dict[str, Any]) -> str:
    if measured.get("updates_per_s") is None:
        return f"failed: {measured.get('learner_error', '?')}"
    return f"{measured['updates_per_s']:.3g}"


def measure(kind: str, size: str, chunks: int, swaps: int, updates: int) -> dict[str, Any]:
    """Every figure of one VLA at one size (module doc): the actor's side and the learner's each
    in a spawned process of its own, as in a run, so each peak RSS is its own. A learner that
    dies (out of memory, say) is reported as such; the actor's figures stand."""
    with tempfile.TemporaryDirectory() as tmp:
        actor = in_child(actor_side, kind, size, chunks, swaps, tmp)
        try:
            learner = in_child(learner_side, str(Path(tmp) / size), updates)
        except MeasurerDiedError as exc:
            learner = {"updates_per_s": None, "learner_error": str(exc)}
    return {**actor, **learner}


class MeasurerDiedError(RuntimeError):
    """A measuring process that ended without its figures."""


def in_child(fn: Any, *args: Any) -> dict[str, Any]:
    """``fn(*args)`` in a spawned process, its figures back as JSON; :class:`MeasurerDiedError` naming how
    it ended when it gives none (the kernel's OOM killer leaves no traceback)."""
    ctx = mp.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_child_main, args=(send, fn, args), daemon=True)
    process.start()
    send.close()
    data: bytes | None = None
    while process.is_alive() or receive.poll(0):
        if receive.poll(1.0):
            with contextlib.suppress(EOFError):  # the pipe closed by a death, with nothing sent
                data = receive.recv_bytes()
            break
    process.join()
    if data is None:
        killed = " (SIGKILL: out of memory?)" if process.exitcode == -signal.SIGKILL else ""
        raise MeasurerDiedError(f"{fn.__name__} exited with code {process.exitcode}{killed}")
    answer = json.loads(data)
    if "error" in answer:
        raise MeasurerDiedError(f"{fn.__name__} failed: {answer['error']}")
    figures: dict[str, Any] = answer["figures"]
    return figures


def _child_main(send: Any, fn: Any, args: tuple[Any, ...]) -> None:
    try:
        answer = {"figures": fn(*args)}
    except Exception as exc:
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    send.send_bytes(json.dumps(answer).encode())


def _spec() -> Any:
    from robotrl.config.load import load_config
    from robotrl.sim import make_env

    env = make_env(load_config(["env=so101_pick_place", f"env.cameras=[{','.join(CAMERAS)}]"]).env)
    spec = env.spec
    env.close()
    return spec


def actor_side(kind: str, size: str, chunks: int, swaps: int, tmp: str) -> dict[str, Any]:
    """Make the folder ``tmp/size``, then the actor's figures: chunks and hot swaps."""
    from robotrl.policy.lerobot import LerobotChunkPolicy
    from robotrl.policy.vla import MAKERS

    torch.set_num_threads(1)
    spec = _spec()
    start = time.perf_counter()
    folder = MAKERS[kind](Path(tmp) / size, size, spec, HORIZON)
    make_s = time.perf_counter() - start
    start = time.perf_counter()
    active = LerobotChunkPolicy.load(folder)
    load_s = time.perf_counter() - start
    params = list(active.policy.parameters())
    trainable = active.trainable_tensors()
    update_bytes = sum(t.nbytes for t in trainable.values())
    model_bytes = sum(p.numel() * p.element_size() for p in params)
    observation = _observation(spec)
    chunk_ms = chunk_times(active, observation, chunks)
    installed_ms, first_chunk_ms = hot_swaps(active, trainable, observation, swaps, Path(tmp))
    return {
        "params": sum(p.numel() for p in params),
        "trainable": sum(t.size for t in trainable.values()),
        "update_mb": update_bytes / 1e6,
        "update_share": round(update_bytes / model_bytes, 4),
        "chunk_ms_p50": percentile(chunk_ms, 50),
        "chunk_ms_p99": percentile(chunk_ms, 99),
        "installed_ms_p50": percentile(installed_ms, 50),
        "installed_ms_p99": percentile(installed_ms, 99),
        "first_chunk_ms_p50": percentile(first_chunk_ms, 50),
        "first_chunk_ms_p99": percentile(first_chunk_ms, 99),
        "swaps": len(installed_ms),
        "make_s": round(make_s, 1),
        "load_s": round(load_s, 1),
        "actor_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def learner_side(folder: str, updates: int) -> dict[str, Any]:
    """The learner's figures for the VLA in ``folder``: updates/s on the CPU, and on CUDA when present."""
    from robotrl.policy.lerobot import LerobotChunkPolicy

    torch.set_num_threads(1)
    policy = LerobotChunkPolicy.load(folder)
    spec = policy.spec
    updates_per_s = learner_updates(policy, spec, updates, torch.device("cpu"))
    del policy
    gc.collect()
    on_cuda = cuda_figures(Path(folder), spec, updates) if torch.cuda.is_available() else {}
    return {
        "updates_per_s": updates_per_s,
        "learner_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        **on_cuda,
    }


def chunk_times(policy: Any, observation: Any, chunks: int) -> list[float]:
    """Milliseconds of each of ``chunks`` inferences with a :data:`PREFIX`-row prefix (after one
    warm-up), through RTC; the prefix must come back exact."""
    prefix = np.zeros((PREFIX, policy.action_dim), np.float32)
    policy.infer(observation, prefix, PREFIX)  # warm-up
    times = []
    for _ in range(chunks):
        start = time.perf_counter()
        chunk = policy.infer(observation, prefix, PREFIX)  # returns on the host: synchronised
        times.append((time.perf_counter() - start) * 1e3)
        if not np.array_equal(chunk[:PREFIX], prefix):
            raise AssertionError("the committed prefix came back changed")
    return times


def cuda_figures(folder: Path, spec: Any, updates: int, chunks: int = 10) -> dict[str, Any]:
    """Chunk times, learner updates/s (bf16 autocast; pi0.5 with gradient checkpointing) and peak
    GPU memory on the first CUDA device, for the folder's VLA."""
    from robotrl.policy.lerobot import LerobotChunkPolicy

    device = torch.device("cuda")
    policy = LerobotChunkPolicy.load(folder, spec, device="cuda")
    chunk_ms = chunk_times(policy, _observation(spec), chunks)
    torch.cuda.reset_peak_memory_stats()
    updates_per_s = learner_updates(policy, spec, max(updates, 5), device)
    out = {
        "cuda_device": torch.cuda.get_device_name(device),
        "cuda_chunk_ms_p50": percentile(chunk_ms, 50),
        "cuda_chunk_ms_p99": percentile(chunk_ms, 99),
        "cuda_updates_per_s": updates_per_s,
        "cuda_peak_training_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2),
    }
    del policy
    gc.collect()
    torch.cuda.empty_cache()
    return out


def _observation(spec: Any) -> Any:
    from robotrl.core.types import Observation

    rng = np.random.default_rng(0)
    images = {cam: rng.integers(0, 256, shape, dtype=np.uint8) for cam, shape in spec.camera_shapes.items()}
    return Observation(
        0, rng.standard_normal(len(spec.state_names)).astype(np.float32), images, spec.instruction
    )


def hot_swaps(
    active: Any, trainable: dict[str, Any], observation: Any, swaps: int, tmp: Path
) -> tuple[list[float], list[float]]:
    """(publish -> staged ms, publish -> first chunk with the new version ms) for ``swaps`` updates."""
    from robotrl.actor.slots import PolicySlots, spare_of
    from robotrl.transport.weight_checks import shipped_layout
    from robotrl.transport.weight_subscriber import WeightSubscriber
    from robotrl.transport.weights import WeightPublisher

    slots = PolicySlots(active, spare_of(active), zero_copy=True)
    publisher = WeightPublisher(f"ipc://{tmp}/weights.sock")
    subscriber = WeightSubscriber(publisher.endpoint, expected=shipped_layout(active))
    published: dict[int, float] = {}
    installed: dict[int, float] = {}
    first_chunk: dict[int, float] = {}
    stop = threading.Event()

    def loader() -> None:
        while not stop.is_set():
            update = subscriber.recv(0.05)
            if update is not None and slots.stage(update):
                installed[update.policy_version] = time.perf_counter()

    def actor() -> None:
        prefix = np.zeros((PREFIX, active.action_dim), np.float32)
        while not stop.is_set():
            slots.swap_if_staged()
            version = slots.policy_version
            slots.active.infer(observation, prefix, PREFIX)
            first_chunk.setdefault(version, time.perf_counter())

    threads = [threading.Thread(target=loader, daemon=True), threading.Thread(target=actor, daemon=True)]
    for thread in threads:
        thread.start()
    rng = np.random.default_rng(1)
    try:
        for _ in range(swaps):
            tensors = {n: t + rng.standard_normal(1).astype(t.dtype) * 1e-3 for n, t in trainable.items()}
            start = time.perf_counter()
            version = publisher.publish(tensors, subset="trainable")
            published[version] = start
            deadline = time.monotonic() + 600
            while version not in first_chunk and time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=600)
        subscriber.close()
        publisher.close()
    done = [v for v in published if v in installed and v in first_chunk]
    return (
        [(installed[v] - published[v]) * 1e3 for v in done],
        [(first_chunk[v] - published[v]) * 1e3 for v in done],
    )


def learner_updates(policy: Any, spec: Any, updates: int, device: torch.device) -> float:
    """Updates per second at batch :data:`BATCH` on the trainable parameters (one warm-up first),
    on ``device`` as the learner trains (its processors moved there; bf16 autocast on CUDA)."""
    from robotrl.core import keys
    from robotrl.learner.torch_utils import autocast

    g = torch.Generator().manual_seed(2)
    a = len(spec.action_names)
    batch: dict[str, Any] = {
        keys.STATE: torch.randn(BATCH, len(spec.state_names), generator=g),
        keys.ACTION: torch.randn(BATCH, HORIZON, a, generator=g),
        keys.PREFIX_LEN: torch.randint(0, PREFIX, (BATCH,), generator=g),
        keys.ACTION_MASK: torch.ones(BATCH, HORIZON, dtype=torch.bool),
        keys.TASK: [spec.instruction] * BATCH,
    }
    for cam, shape in spec.camera_shapes.items():
        batch[keys.IMAGE_PREFIX + cam] = torch.randint(
            0, 256, (BATCH, *shape), generator=g, dtype=torch.uint8
        )
    batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    policy.prepare_training(device)
    trained = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=1e-4)
    policy.train()

    def step() -> None:
        with autocast(device):
            loss = policy.per_sample_loss(batch).float().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(updates):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return updates / (time.perf_counter() - start)
