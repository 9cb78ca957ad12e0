"""The inference worker: a separate process that owns the policy, for wall-clock mode.

The control loop must not share a GIL (or a garbage collector) with torch, so the
policy lives here. Observations arrive and chunks leave over a ZeroMQ PAIR socket on
an ipc:// endpoint, in the wire codec's frames (no pickle); the loop's side never
blocks. The worker holds two weight slots: a loader thread stages new weights into the
spare while the active one infers, and the slots swap between two inferences. Each
staged version is announced at once, so the loop can ask for a chunk of the new
weights instead of running out its old plan first.

The worker is started as ``python -m robotrl.actor.worker --endpoint E --spec JSON``;
the spec names the policy factory (``module:function`` plus JSON keyword arguments)
and, optionally, a weight-source factory. It exits when told, when its parent dies, or
when the socket goes silent past its deadline.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import importlib
import json
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import zmq

from robotrl.actor.inference import Continuations, run_inference, seed_everything
from robotrl.actor.slots import PolicySlots, spare_of
from robotrl.actor.timing import InferenceFailedError
from robotrl.core.protocols import ChunkPolicy, WeightSource
from robotrl.core.types import InferenceReply, InferenceRequest
from robotrl.transport.weight_checks import shipped_layout
from robotrl.wire.codec import WireError, decode, encode
from robotrl.wire.inference import (
    INFER,
    STAGED,
    STOP,
    WorkerReady,
    message_to_ready,
    message_to_reply,
    message_to_request,
    message_to_staged,
    ready_to_message,
    reply_to_message,
    request_to_message,
    staged_message,
    stop_message,
)

log = logging.getLogger(__name__)

_STAGED_INPROC = "inproc://staged"


@dataclass(frozen=True)
class WorkerSpec:
    """What the worker builds; plain JSON so the process starts without pickle."""

    policy_factory: str
    """'module:function' returning a ChunkPolicy; called twice (active and spare slot)."""
    policy_kwargs: dict[str, Any] = field(default_factory=dict)
    weights_factory: str | None = None
    """'module:function' returning a WeightSource polled by the loader thread; None: fixed weights."""
    weights_kwargs: dict[str, Any] = field(default_factory=dict)
    weights_layout: bool = False
    """Also pass the policy's layout (tensor names, shapes, dtypes) as ``expected=``, so the
    source refuses an update that does not fit before holding it."""
    initial_policy_version: int = 0
    torch_threads: int | None = None
    """torch intra-op threads in the worker; None leaves torch's default."""
    pythonpath: list[str] = field(default_factory=list)
    """Extra import paths for the factories (tests put their doubles here)."""
    action_bounds: list[list[float]] | None = None
    """[low, high] of the arm's actions: the committed rows of a pipelined request are clipped
    to them, as the arm executes them (``Continuations``); None: not clipped."""
    realtime_priority: int = 0
    """SCHED_FIFO priority of the thread that runs inferences (0: normal scheduling): a learner
    on the same cores then cannot stretch an inference past the delay the loop planned for.
    Weights load in their own thread at normal priority."""


def _trained_max_delay(policy: ChunkPolicy) -> int:
    """The policy's trained prefix limit for the ready message; -1 when it does not say.

    Only a built-in flow policy says, and then its module is loaded already: importing the
    policy package for any other policy would hold up the ready message by torch's import.
    """
    if "robotrl.policy.flow" not in sys.modules:
        return -1
    from robotrl.policy.factory import trained_max_delay

    trained = trained_max_delay(policy)
    return -1 if trained is None else trained


def _import(entry: str) -> Callable[..., Any]:
    module, _, name = entry.partition(":")
    fn: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return fn


# -- the worker process ------------------------------------------------------------------


def _die_with_parent() -> None:
    """Ask Linux to SIGTERM this process when its parent dies (no orphaned workers)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _load_weights_forever(
    slots: PolicySlots, source: WeightSource, stop: threading.Event, ctx: zmq.Context[zmq.Socket[bytes]]
) -> None:
    """Stage every verified update into the spare slot and tell the serving thread (which owns
    the actor's socket) over an inproc pipe."""
    announce = ctx.socket(zmq.PAIR)
    announce.setsockopt(zmq.LINGER, 0)
    announce.connect(_STAGED_INPROC)
    try:
        while not stop.wait(0.002):
            update = source.latest()
            if update is not None and slots.stage(update):
                staged_at = time.monotonic()
                log.info("weights v%d staged", update.policy_version)
                announce.send_multipart([str(update.policy_version).encode(), repr(staged_at).encode()])
    finally:
        announce.close()


def serve(endpoint: str, spec: WorkerSpec) -> None:
    """The worker's main loop: answer inference requests until told to stop."""
    sys.path[:0] = spec.pythonpath
    if spec.torch_threads is not None:
        import torch

        torch.set_num_threads(spec.torch_threads)
    factory = _import(spec.policy_factory)
    seed_everything(0)
    active: ChunkPolicy = factory(**spec.policy_kwargs)
    slots = PolicySlots(
        active, spare_of(active), spec.initial_policy_version, zero_copy=True
    )  # updates are the loader's own
    stop = threading.Event()
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = ctx.socket(zmq.PAIR)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    staged = ctx.socket(zmq.PAIR)
    staged.setsockopt(zmq.LINGER, 0)
    staged.bind(_STAGED_INPROC)
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    poller.register(staged, zmq.POLLIN)
    source: WeightSource | None = None
    if spec.weights_factory is not None:
        kwargs = dict(spec.weights_kwargs)
        if spec.weights_layout:
            kwargs["expected"] = shipped_layout(active)
        source = _import(spec.weights_factory)(**kwargs)
        loader = threading.Thread(target=_load_weights_forever, args=(slots, source, stop, ctx), daemon=True)
        loader.start()
    bounds = None
    if spec.action_bounds is not None:
        low, high = (np.asarray(b, dtype=np.float32) for b in spec.action_bounds)
        bounds = (low, high)
    continuations = Continuations(bounds)
    parent = os.getppid()
    ready = WorkerReady(
        active.horizon, _trained_max_delay(active), active.action_dim, slots.policy_version, os.getpid()
    )
    gc.collect()
    gc.freeze()  # the policy's many objects are never scanned again: no long collection mid-inference
    sock.send_multipart(encode(ready_to_message(ready)))
    try:
        with contextlib.ExitStack() as priority:
            if spec.realtime_priority:
                _raise_priority(priority, spec.realtime_priority)
            _answer(sock, staged, poller, slots, continuations, parent)
    finally:
        stop.set()
        if source is not None:
            loader.join(timeout=2.0)
            source.close()
        staged.close()
        sock.close()
        ctx.term()


def _raise_priority(stack: contextlib.ExitStack[bool | None], priority: int) -> None:
    """This thread at SCHED_FIFO ``priority`` until ``stack`` closes; refused, a warning and
    normal scheduling (the actor made sure of the right before it started the worker)."""
    from robotrl.actor.realtime import RealtimeError, realtime_thread

    try:
        stack.enter_context(realtime_thread(priority))
    except RealtimeError as exc:
        log.warning("inferences run at normal priority (the worker's share, %d): %s", priority, exc)


def _answer(
    sock: zmq.Socket[bytes],
    staged: zmq.Socket[bytes],
    poller: zmq.Poller,
    slots: PolicySlots,
    continuations: Continuations,
    parent: int,
) -> None:
    """Answer inference requests until told to stop or the parent is gone."""
    while os.getppid() == parent:
        events = dict(poller.poll(200))
        if staged in events:
            version, staged_at = staged.recv_multipart()
            sock.send_multipart(encode(staged_message(int(version), float(staged_at))))
        if sock not in events:
            continue
        try:
            msg = decode(sock.recv_multipart(copy=False))
            request = message_to_request(msg) if msg.kind == INFER else None
        except WireError as exc:
            log.warning("worker refuses an unreadable message: %s", exc)
            continue
        if msg.kind == STOP:
            break
        if request is None:
            log.warning("worker ignores a %r message", msg.kind)
            continue
        slots.swap_if_staged()  # between two inferences, never during one
        reply = run_inference(slots, request, continuations)
        sock.send_multipart(encode(reply_to_message(reply)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m robotrl.actor.worker")
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--spec", required=True, help="WorkerSpec as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="worker %(levelname)s %(message)s")
    _die_with_parent()
    serve(args.endpoint, WorkerSpec(**json.loads(args.spec)))
    return 0


# -- the actor's side --------------------------------------------------------------------


class ProcessInference:
    """An ``InferenceBackend`` whose policy runs in a worker process; never blocks on submit or poll."""

    def __init__(self, spec: WorkerSpec, startup_timeout_s: float = 120.0) -> None:
        self._dir = tempfile.mkdtemp(prefix="robotrl-worker-")
        endpoint = f"ipc://{self._dir}/infer.sock"
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.PAIR)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.bind(endpoint)
        cmd = [
            sys.executable,
            "-m",
            "robotrl.actor.worker",
            "--endpoint",
            endpoint,
            "--spec",
            json.dumps(asdict(spec)),
        ]
        self.process = subprocess.Popen(cmd)  # inherits stdout/stderr: its logs sit beside ours
        self.bad_replies = 0
        self._newest_version = spec.initial_policy_version
        self._newest_staged_at = math.nan
        self.info = self._await_ready(startup_timeout_s)

    def _await_ready(self, timeout_s: float) -> WorkerReady:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.close()
                raise InferenceFailedError(
                    f"inference worker exited with code {self.process.returncode} at start"
                )
            if self._sock.poll(100):
                with contextlib.suppress(WireError):  # anything else before it is ignored
                    return message_to_ready(decode(self._sock.recv_multipart()))
        self.close()
        raise InferenceFailedError(f"inference worker not ready within {timeout_s:.0f} s")

    def submit(self, request: InferenceRequest) -> None:
        self._sock.send_multipart(encode(request_to_message(request)), flags=zmq.NOBLOCK)

    def poll(self) -> InferenceReply | None:
        while True:  # announcements of staged weights come between the replies
            try:
                frames = self._sock.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return None
            try:
                msg = decode(frames, require_finite=False)
                if msg.kind == STAGED:  # the last staged is the newest, even a new session's lower version
                    self._newest_version, self._newest_staged_at = message_to_staged(msg)
                    continue
                reply = message_to_reply(msg)
            except WireError as exc:
                self.bad_replies += 1
                log.warning("unreadable reply from the inference worker: %s", exc)
                return None
            return reply

    def newest_version(self) -> int:
        """The newest weights the worker holds (staged or active), as of the last :meth:`poll`."""
        return self._newest_version

    def newest_staged_at(self) -> float:
        """When (``time.monotonic``) the worker installed :meth:`newest_version` in its spare
        slot; NaN for the weights it started with."""
        return self._newest_staged_at

    def wait(self, timeout_s: float) -> InferenceReply | None:
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or self.failure() is not None:
                return None
            if self._sock.poll(min(int(left * 1000) + 1, 100)):
                reply = self.poll()
                if reply is not None:
                    return reply

    def wait_for_news(self, timeout_s: float) -> bool:
        """Whether a reply or an announcement came within ``timeout_s`` (rounded down to the
        millisecond: the caller sleeps the rest to its deadline)."""
        return bool(self._sock.poll(max(int(timeout_s * 1000), 0)))

    def failure(self) -> str | None:
        code = self.process.poll()
        return None if code is None else f"inference worker exited with code {code}"

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(zmq.ZMQError):
                self._sock.send_multipart(encode(stop_message()), flags=zmq.NOBLOCK)
            try:
                self.process.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self._sock.close()
        self._ctx.term()
        shutil.rmtree(self._dir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
