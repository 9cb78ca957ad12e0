"""Independent `robotrl` steps run a few at a time, each with its output in its own log.

The latency sweep's cells are single-threaded evaluations of one checkpoint: on a machine
with N cores N of them run side by side. Each cell is a step like the demo's (a stamp in its
folder), so a sweep that was interrupted, or extended by more latencies, redoes only the
cells it has not finished.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from robotrl.core.run_folder import STEP_LOG
from robotrl.experiment.steps import StepFailedError, is_cached, step_env, step_key, write_stamp

LOG_TAIL_LINES = 15


@dataclass(frozen=True)
class Job:
    title: str
    out_dir: Path
    argv: tuple[str, ...]
    inputs: tuple[tuple[str, str | None], ...] = ()
    """What the job's output depends on besides its command (name, identity of the version)."""
    complete: Callable[[Path], bool] | None = None
    """Whether the output in ``out_dir`` is whole: a role stopped by Ctrl-C may exit 0 with
    part of its work done, which must not be cached as the job's result."""

    @property
    def log(self) -> Path:
        return self.out_dir / STEP_LOG


class _StoppedError(StepFailedError):
    """A job not started, or terminated, because another one failed (not a cause itself)."""


@dataclass(frozen=True)
class JobDone:
    job: Job
    cached: bool
    seconds: float


class _Children:
    """The jobs' live processes, so that one failure or a Ctrl-C stops them all."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen[bytes]] = set()
        self._stopping = False

    def run(self, job: Job) -> JobDone:
        key = step_key(job.argv, dict(job.inputs))
        if is_cached(job.out_dir, key):
            return JobDone(job, True, 0.0)
        job.out_dir.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        with job.log.open("wb") as log:
            with self._lock:
                if self._stopping:
                    raise _StoppedError(f"{job.title}: not started (the run is stopping)")
                proc = subprocess.Popen(
                    job.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=step_env()
                )
                self._procs.add(proc)
            code = proc.wait()
            with self._lock:
                self._procs.discard(proc)
        seconds = time.perf_counter() - start
        if code != 0:
            self._fail(job, f"failed with exit code {code}; its output ({job.log}) ends:\n{self._tail(job)}")
        if job.complete is not None and not job.complete(job.out_dir):
            self._fail(job, f"stopped before its work was done; its output: {job.log}")
        write_stamp(job.out_dir, key, seconds)
        return JobDone(job, False, seconds)

    def _fail(self, job: Job, why: str) -> NoReturn:
        """Stop the rest (before this thread takes the next queued job) and raise; a job that
        failed because the rest was already stopping is not the cause."""
        with self._lock:
            stopped_by_another = self._stopping
        if stopped_by_another:
            raise _StoppedError(f"{job.title}: {why}")
        self.stop()
        raise StepFailedError(f"{job.title} {why}")

    @staticmethod
    def _tail(job: Job) -> str:
        return "\n".join(job.log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:])

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            for proc in self._procs:
                proc.terminate()


def run_parallel(jobs: Sequence[Job], workers: int, on_done: Callable[[JobDone], None]) -> None:
    """Run every job not already cached, at most ``workers`` at once, calling ``on_done`` in
    this thread as each ends (in the order they end).

    A job that fails, or a Ctrl-C, stops the rest: running jobs are terminated (their folders
    get no stamp), queued ones never start, and the failure (or KeyboardInterrupt) is raised.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    children = _Children()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="robotrl-job") as pool:
        futures = [pool.submit(children.run, job) for job in jobs]
        try:
            for future in as_completed(futures):
                on_done(future.result())
        except BaseException as exc:
            for future in futures:
                future.cancel()
            children.stop()
            if isinstance(exc, _StoppedError):
                raise _cause(futures) from None
            raise


def _cause(futures: Sequence[Future[JobDone]]) -> StepFailedError:
    """The failure that stopped the others (the first job to fail on its own)."""
    stopped: StepFailedError | None = None
    for future in futures:
        if future.cancelled():
            continue
        exc = future.exception()
        if isinstance(exc, StepFailedError):
            if not isinstance(exc, _StoppedError):
                return exc
            stopped = stopped or exc
    assert stopped is not None
    return stopped
