"""Supervise role processes: start them, restart one that crashes, stop them in order.

A role is a command line and a log file. Each child runs in its own process group
(so a terminal Ctrl-C reaches only the supervisor, which then stops the children in
the right order) and gets SIGTERM from the kernel if the supervisor dies, so no
child outlives it. A child that exits 0 is done; one that exits otherwise, or is
killed, has crashed and is restarted after a back-off, up to ``max_restarts`` times.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

_PR_SET_PDEATHSIG = 1


class State(Enum):
    running = "running"
    waiting = "waiting"  # crashed, restart pending after the back-off
    done = "done"  # exited 0
    failed = "failed"  # crashed more often than allowed
    stopped = "stopped"  # stopped by the supervisor


@dataclass(frozen=True)
class RoleSpec:
    name: str
    argv: Sequence[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment variables of the child."""


@dataclass
class Child:
    spec: RoleSpec
    process: subprocess.Popen[bytes] | None = None
    state: State = State.waiting
    restarts: int = 0
    started_at: float = 0.0
    restart_at: float = 0.0
    last_exit: int | None = None

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent dies (Linux; a no-op elsewhere)."""
    os.setpgrp()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class Supervisor:
    """Owns a set of children; :meth:`poll` advances restarts, :meth:`stop` ends them in order."""

    def __init__(
        self,
        specs: Sequence[RoleSpec],
        max_restarts: int = 3,
        backoff_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"role names must be unique, got {names}")
        self.children = {s.name: Child(s) for s in specs}
        self.max_restarts = max_restarts
        self.backoff_s = backoff_s
        self.clock = clock
        self._on_event = on_event or (lambda _msg: None)

    # -- starting ------------------------------------------------------------------

    def start(self) -> None:
        for child in self.children.values():
            self._spawn(child)

    def _spawn(self, child: Child) -> None:
        spec = child.spec
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(spec.log_path, "ab") as log:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            log.write(f"\n==== {stamp} launch: start #{child.restarts} of {spec.name}: ".encode())
            log.write((" ".join(spec.argv) + "\n").encode())
            log.flush()
            child.process = subprocess.Popen(
                list(spec.argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **spec.env},
                preexec_fn=_die_with_parent,
            )
        child.state = State.running
        child.started_at = self.clock()
        self._on_event(f"{spec.name}: started (pid {child.pid})")

    # -- watching ------------------------------------------------------------------

    def poll(self) -> None:
        """Notice exits, schedule and run restarts. Call it every few hundred milliseconds."""
        now = self.clock()
        for child in self.children.values():
            if child.state is State.running and child.process is not None:
                code = child.process.poll()
                if code is None:
                    continue
                child.last_exit = code
                if code == 0:
                    child.state = State.done
                    self._on_event(f"{child.spec.name}: finished")
                elif child.restarts >= self.max_restarts:
                    child.state = State.failed
                    self._on_event(
                        f"{child.spec.name}: exited with {_describe(code)}; "
                        f"{child.restarts} restarts used, giving up (log: {child.spec.log_path})"
                    )
                else:
                    child.state = State.waiting
                    child.restart_at = now + self.backoff_s * 2**child.restarts
                    self._on_event(
                        f"{child.spec.name}: exited with {_describe(code)}; restarting "
                        f"(log: {child.spec.log_path})"
                    )
            elif child.state is State.waiting and child.process is not None and now >= child.restart_at:
                child.restarts += 1
                self._spawn(child)

    def states(self) -> dict[str, State]:
        return {name: c.state for name, c in self.children.items()}

    def any_failed(self) -> bool:
        return any(c.state is State.failed for c in self.children.values())

    # -- stopping ------------------------------------------------------------------

    def stop(self, names: Sequence[str], timeout_s: float) -> None:
        """SIGINT these roles together, wait up to ``timeout_s``, then SIGKILL what is left."""
        live = [self.children[n] for n in names if self._alive(self.children[n])]
        for child in self.children.values():
            if child.spec.name in names and child.state is State.waiting:
                child.state = State.stopped  # a pending restart is cancelled
        for child in live:
            assert child.process is not None
            child.process.send_signal(signal.SIGINT)  # the role stops its own helpers
        deadline = self.clock() + timeout_s
        for child in live:
            assert child.process is not None
            try:
                child.process.wait(timeout=max(0.0, deadline - self.clock()))
            except subprocess.TimeoutExpired:
                self._on_event(f"{child.spec.name}: did not stop within {timeout_s:.0f} s; killed")
                self._signal(child, signal.SIGKILL)
                child.process.wait()
            self._signal(child, signal.SIGKILL)  # helpers the role left behind, if any
            child.last_exit = child.process.returncode
            if child.state is State.running:
                child.state = State.done if child.last_exit == 0 else State.stopped

    def kill_all(self) -> None:
        """Last resort (the supervisor itself is failing): SIGKILL every live child and reap it."""
        for child in self.children.values():
            if self._alive(child):
                self._signal(child, signal.SIGKILL)
                assert child.process is not None
                child.process.wait()

    @staticmethod
    def _alive(child: Child) -> bool:
        return child.process is not None and child.process.poll() is None

    @staticmethod
    def _signal(child: Child, sig: int) -> None:
        """Signal the child's whole process group (its own helpers, e.g. an inference worker)."""
        assert child.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.process.pid, sig)


def _describe(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"
