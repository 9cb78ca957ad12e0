"""`robotrl bench policy`: chunk inference latency per built-in size, and weight-load time.

Inference: batch 1, an SO-101-shaped observation (12-d state, two 96x96 cameras,
an instruction), H=32, 5 flow steps, a committed prefix of 4 actions (the
real-time-chunking call the actor makes). p50 and p99 per size, on CPU, and on
CUDA too when present. CPU runs use the intra-op threads an inference worker
should use on this machine: half the cores, at most 4 (one on a 2-core box,
where more threads contend with the control loop and are much slower).

Weight load: the base policy's tensors serialised with safetensors into bytes
(what arrives from the learner), then parsed into zero-copy views and copied into
the live policy in place with ``load_weights`` (one copy in all). The baseline,
measured in the same run, copies the same bytes once into existing memory: the
ratio is what loading costs over the copy it cannot avoid.
"""

from __future__ import annotations

import json
import statistics
import struct
import time
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from safetensors.numpy import save as st_save

from robotrl.bench.report import report
from robotrl.config.policy import PolicyConfig, PolicySize
from robotrl.core.types import EnvSpec, Observation
from robotrl.policy.factory import inference_threads
from robotrl.policy.flow import FlowChunkPolicy, parameter_count

HORIZON, DELAY, IMAGE = 32, 4, 96
DTYPES = {"F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "U8": "u1", "BOOL": "?"}


def so101_spec() -> EnvSpec:
    joints = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
    return EnvSpec(
        name="so101-bench",
        action_names=tuple(f"{j}.pos" for j in joints),
        action_low=(-100.0,) * 5 + (0.0,),
        action_high=(100.0,) * 5 + (100.0,),
        state_names=tuple(f"{j}.pos" for j in joints) + tuple(f"{j}.vel" for j in joints),
        camera_shapes={"front": (IMAGE, IMAGE, 3), "wrist": (IMAGE, IMAGE, 3)},
        instruction="pick up the cube and place it in the bowl",
    )


def time_inference(policy: FlowChunkPolicy, calls: int, cuda: bool) -> tuple[list[float], list[float]]:
    """(wall ms, this thread's CPU ms) per ``infer`` call, after warm-up.

    On a shared machine wall time includes waiting for a core; with one intra-op
    thread, CPU time is what the call would take on an idle core.
    """
    rng = np.random.default_rng(0)
    spec = policy.spec
    obs = Observation(
        0,
        rng.standard_normal(spec.state_dim).astype(np.float32),
        {c: rng.integers(0, 256, s, dtype=np.uint8) for c, s in spec.camera_shapes.items()},
        spec.instruction,
    )
    prefix = rng.uniform(-50, 50, (DELAY, spec.action_dim)).astype(np.float32)
    for _ in range(3):
        policy.infer(obs, prefix, DELAY)
    wall, cpu = [], []
    for _ in range(calls):
        if cuda:
            torch.cuda.synchronize()
        start, start_cpu = time.perf_counter(), time.thread_time()
        policy.infer(obs, prefix, DELAY)  # returns numpy: includes the device-to-host copy
        wall.append((time.perf_counter() - start) * 1e3)
        cpu.append((time.thread_time() - start_cpu) * 1e3)
    return wall, cpu


def safetensors_views(payload: bytes) -> dict[str, npt.NDArray[Any]]:
    """Read-only numpy views into a safetensors buffer: no copy before ``load_weights``'s own."""
    (header_len,) = struct.unpack("<Q", payload[:8])
    header = json.loads(payload[8 : 8 + header_len])
    base = 8 + header_len
    buf = memoryview(payload)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        dtype = np.dtype(DTYPES[info["dtype"]])
        out[name] = np.frombuffer(buf[base + start : base + end], dtype=dtype).reshape(info["shape"])
    return out


def time_weight_load(policy: FlowChunkPolicy, rounds: int) -> tuple[float, float, int]:
    """(load ms, plain-copy ms, bytes): medians over ``rounds`` for the policy's full weights."""
    payload = st_save(policy.trainable_tensors())
    load_ms, copy_ms = [], []
    source = np.frombuffer(payload, dtype=np.uint8)
    target = np.empty_like(source)  # the baseline copies into memory that exists, as load_weights does
    for _ in range(rounds):
        start = time.perf_counter()
        policy.load_weights(safetensors_views(payload))
        load_ms.append((time.perf_counter() - start) * 1e3)
        start = time.perf_counter()
        np.copyto(target, source)
        copy_ms.append((time.perf_counter() - start) * 1e3)
    return statistics.median(load_ms), statistics.median(copy_ms), len(payload)


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def run(quick: bool = False) -> dict[str, Any]:
    threads = inference_threads()
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    spec = so101_spec()
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    calls = (
        {PolicySize.tiny: 30, PolicySize.mini: 30, PolicySize.small: 30, PolicySize.base: 10}
        if quick
        else {
            PolicySize.tiny: 200,
            PolicySize.mini: 200,
            PolicySize.small: 200,
            PolicySize.base: 40,
        }
    )
    result: dict[str, Any] = {"bench": "policy"}
    rows: list[list[Any]] = []
    for size in PolicySize:
        cpu_policy = FlowChunkPolicy(spec, PolicyConfig(size=size, horizon=HORIZON, max_delay=12)).eval()
        params = parameter_count(cpu_policy)
        for device in devices:
            policy = cpu_policy.to(device)
            ms, cpu_ms = time_inference(policy, calls[size], cuda=device == "cuda")
            p50, p99 = statistics.median(ms), percentile(ms, 99)
            suffix = "" if device == "cpu" else "_gpu"
            result[f"{size.value}{suffix}_p50_ms"] = round(p50, 2)
            result[f"{size.value}{suffix}_p99_ms"] = round(p99, 2)
            cpu_p50 = "-"
            if device == "cpu" and threads == 1:
                cpu_p50 = f"{statistics.median(cpu_ms):.1f}"
                result[f"{size.value}_cpu_time_p50_ms"] = round(statistics.median(cpu_ms), 2)
            rows.append([size.value, device, f"{params / 1e6:.2f}M", p50, p99, cpu_p50])
        if size is PolicySize.base:
            load_ms, copy_ms, nbytes = time_weight_load(cpu_policy.to("cpu"), 3 if quick else 10)
            result["base_load_ms"] = round(load_ms, 2)
            result["base_copy_ms"] = round(copy_ms, 2)
            result["base_load_ratio_vs_copy"] = round(load_ms / copy_ms, 2)
            result["base_weight_mb"] = round(nbytes / 1e6, 1)
        del cpu_policy
    result["cpu_threads"] = threads
    rows.append(
        ["base weight load", "cpu", f"{result['base_weight_mb']} MB", result["base_load_ms"], "-", "-"]
    )
    rows.append(["  plain copy (baseline)", "cpu", "", result["base_copy_ms"], "-", "-"])
    report(
        f"policy: chunk inference at batch 1, H={HORIZON}, prefix {DELAY}, "
        f"{threads} CPU thread(s) ({'quick' if quick else 'full'} run)",
        ["size", "device", "params", "p50 ms", "p99 ms", "CPU-time p50 ms"],
        rows,
        result,
    )
    return result
