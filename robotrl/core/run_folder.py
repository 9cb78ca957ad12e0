"""The files of a run folder and of an experiment's output folder: every name, and a typed
read and write for each kind of file.

A run folder (``run_dir``) is where the roles write: the learner its metrics, checkpoints and
journal; each actor its progress, summary and sent-rows audit; `robotrl eval` its summary
and one line per episode; `robotrl launch` its status table and each role's log; `robotrl
replay` its reports. An experiment's output folder holds one folder per step (each with a
stamp and, for steps run side by side, an output log) and the experiment's results.

Files another process rewrites while it runs (progress, status, audit) are replaced
atomically; their readers return None for a file that is missing or cannot be read, so a
poller never fails on a role that has not written yet. The formats are plain JSON (the
keys below), so tools other than robotrl read them too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import IO, Any, ClassVar, Self, TypedDict, cast

from robotrl.core.fsync import NO_FSYNC

# -- a run folder ----------------------------------------------------------------------------

EVAL_SUMMARY = "eval_summary.json"
"""`robotrl eval`: the summary table as JSON (actor.report's figures)."""
EVAL_EPISODES = "eval_episodes.jsonl"
"""`robotrl eval`: one :class:`EpisodeRecord` per line."""
LEARNER_METRICS = "learner_metrics.jsonl"
"""The learner: one metrics record per line (keys vary with the algorithm)."""
LEARNER_RECORDING = "learner.rrd"
"""The learner's metrics as a rerun recording (``learner.rerun``)."""
PRETRAIN_METRICS = "pretrain_metrics.jsonl"
"""`robotrl pretrain`: one validation record per line."""
PRETRAIN_SNAPSHOTS = "snapshots"
"""`robotrl pretrain`: the policy at every ``pretrain.keep_every`` steps, one folder per step."""
LAUNCH_STATUS = "launch_status.json"
"""`robotrl launch`: a :class:`LaunchStatus`, rewritten every ``launch.status_every_s``."""
CHECKPOINTS = "checkpoints"
"""The learner's checkpoints, one folder each (written by :mod:`robotrl.learner.checkpoint`)."""
CHECKPOINT_LATEST = "latest"
"""In the checkpoints folder: the name of the newest complete checkpoint."""
CHECKPOINT_STATE = "state.pt"
CHECKPOINT_COUNTERS = "counters.json"
CHECKPOINT_POLICY = "policy.safetensors"
"""In a checkpoint: the algorithm's state, the loop's counters, the published policy tensors."""
JOURNAL = "journal"
"""The learner's write-ahead journal of batches received after its last checkpoint."""
LOGS = "logs"
"""`robotrl launch`: each role's output, ``<role>.log``."""
REPLAY_OPEN_LOOP = "replay_open_loop.json"
REPLAY_RESIM = "replay_resim.json"
REPLAY_TO_LEARNER = "replay_to_learner.json"
REPLAY_RECORDING = "replay.rrd"
"""`robotrl replay`: its reports (one per mode) and its rerun view."""
POLICY_SNAPSHOTS = "policy_snapshots"
"""The learner's published policy every ``learner.snapshot_every_groups`` groups, kept forever:
``group-<N>.safetensors`` and its record beside it as ``group-<N>.json`` (read and written by
:mod:`robotrl.core.policy_snapshots`)."""
CURVE = "curve"
"""The learning curve's evaluation of each policy snapshot, one `robotrl eval` folder each."""

_ACTOR_PROGRESS = "actor_{}_progress.json"
_ACTOR_SUMMARY = "actor_{}_summary.json"
_ACTOR_SENT = "actor_{}_sent.json"

# -- an experiment's output folder -----------------------------------------------------------

STEP_STAMP = ".robotrl_step.json"
"""In a step's folder once the step succeeded: a :class:`StepStamp`."""
STEP_LOG = "output.log"
"""A step run side by side with others: its output."""
RESULTS = "results.json"
"""The demo's results, or the latency sweep's :class:`SweepResults`."""
LEARNING_CURVE = "learning_curve.png"
DEMO_RECORDING = "demo.rrd"
RECORDING_STAMP = ".rerun_stamp"
"""Beside the demo's recording: what it recorded (text), so a new policy records again."""
SWEEP_PLOT = "sweep.png"


def actor_progress_path(run_dir: Path, actor_id: str) -> Path:
    return run_dir / _ACTOR_PROGRESS.format(actor_id)


def actor_summary_path(run_dir: Path, actor_id: str) -> Path:
    return run_dir / _ACTOR_SUMMARY.format(actor_id)


def actor_sent_path(run_dir: Path, actor_id: str) -> Path:
    return run_dir / _ACTOR_SENT.format(actor_id)


def checkpoint_groups(checkpoint: Path) -> int:
    """The update groups the learner had run when it wrote ``checkpoint``."""
    return int(json.loads((checkpoint / CHECKPOINT_COUNTERS).read_text())["groups"])


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of the learner of ``run_dir``, or None."""
    root = run_dir / CHECKPOINTS
    try:
        path = root / (root / CHECKPOINT_LATEST).read_text().strip()
    except OSError:
        return None
    return path if (path / CHECKPOINT_COUNTERS).exists() else None


def snapshot_weights_path(run_dir: Path, group: int) -> Path:
    """The policy tensors the learner of ``run_dir`` published as of update group ``group``."""
    return run_dir / POLICY_SNAPSHOTS / f"group-{group:08d}.safetensors"


def curve_eval_dir(run_dir: Path, group: int) -> Path:
    """The `robotrl eval` folder of the learning curve's point at update group ``group``."""
    return run_dir / CURVE / f"group-{group:08d}"


def role_log_name(role: str) -> str:
    """The log file name of ``role`` (``learner``, ``actor-0``)."""
    return f"{role}.log"


def role_log(run_dir: Path, role: str) -> Path:
    return run_dir / LOGS / role_log_name(role)


# -- JSON files ------------------------------------------------------------------------------


def read_json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when the file is missing, torn or not an object."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def write_json(path: Path, document: Any, indent: int | None = None) -> Path:
    """Write ``document`` to ``path`` (its folder made when missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=indent))
    return path


def replace_json(path: Path, document: Any, indent: int | None = None) -> None:
    """Write ``document`` beside ``path`` and rename it over: readers never see half a file, and a
    failed write leaves no temporary file. Not fsynced (checkpoints are, by their own writer):
    progress and status are rewritten constantly, and a power cut costs only their next rewrite."""
    NO_FSYNC.write_bytes(path, json.dumps(document, indent=indent).encode())


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    """Every record of a JSON-lines file (none when it does not exist)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def last_json_line(path: Path, tail_bytes: int = 16_384) -> dict[str, Any] | None:
    """The last complete JSON object of a JSON-lines file another process appends to, or None."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - tail_bytes))
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line being written, or cut by the tail window
        if isinstance(record, dict):
            return record
    return None


class JsonLinesLog:
    """A JSON-lines file held open for appending, one record a line, each line flushed."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: IO[str] = open(path, "a", buffering=1)  # noqa: SIM115 (held open for the run)

    def write(self, record: Mapping[str, Any]) -> None:
        self._file.write(json.dumps(record) + "\n")

    def close(self) -> None:
        self._file.close()


def append_json_line(path: Path, record: Mapping[str, Any]) -> None:
    """Append one record to a JSON-lines file written now and then (pretraining's validations)."""
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")


class _Record:
    """A dataclass stored as one JSON object: unknown keys are ignored and missing ones take
    their defaults, so files of an older or newer version still read."""

    __dataclass_fields__: ClassVar[dict[str, Any]]  # every subclass is a dataclass

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> Self:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in record.items() if k in known})


# -- eval: summary and episodes --------------------------------------------------------------


class EvalSummary(TypedDict, total=False):
    """The headline figures of a set of episodes (:func:`robotrl.actor.report.summarize`); a
    TypedDict, not a dataclass, since each mode adds its own keys and the file is read back as
    it was written. ``runs`` only in summaries pooled over several evaluations."""

    episodes: int
    success_rate: float
    ci95: list[float]
    """The Wilson 95% interval of ``success_rate``: [low, high]."""
    mean_time_to_success_s: float | None
    starved_ticks: int
    missed_deadlines: int
    jerk_rms: float
    mean_delay_ticks: float | None
    p90_delay_ticks: float | None
    chunks_merged: int
    chunks_refused: dict[str, int]
    inference_errors: int
    prefix_overruns: int
    clamped_ticks: int
    intervention_ticks: int
    outcomes: dict[str, int]
    failures: list[str]
    ticks: int
    jitter_p50_ms: float
    jitter_p99_ms: float
    """Wall-clock time only: how late control ticks went out."""
    env: str
    strategy: str
    latency: str
    wall_s: float
    diagnosis: str
    """Why the robot starved, when it did every chunk."""
    arm: dict[str, int]
    """A real arm: its safety layer's clamps, holds and stops."""
    dataset: dict[str, Any]
    """``actor.record_dataset``: where the episodes went, and how many frames were dropped."""
    transport: dict[str, Any]
    """`robotrl actor`: its transport's counts."""
    runs: list[float]


def write_eval_summary(run_dir: Path, summary: EvalSummary) -> Path:
    return write_json(run_dir / EVAL_SUMMARY, summary, indent=2)


def read_eval_summary(run_dir: Path) -> EvalSummary:
    """The eval summary of ``run_dir`` (raises OSError or ValueError when there is none)."""
    return cast(EvalSummary, json.loads((run_dir / EVAL_SUMMARY).read_text()))


def eval_episodes_ran(run_dir: Path) -> int | None:
    """How many episodes the evaluation in ``run_dir`` ran; None when it wrote no summary."""
    summary = read_json_object(run_dir / EVAL_SUMMARY)
    episodes = None if summary is None else summary.get("episodes")
    return episodes if isinstance(episodes, int) else None


@dataclass(frozen=True)
class EpisodeRecord(_Record):
    """One evaluated episode (as lerobot's eval writes ``per_episode``): which seeds failed, and
    how, is what a success rate alone cannot tell."""

    episode: int
    seed: int
    success: bool
    outcome: str | None
    ticks: int
    success_tick: int | None
    reward: float
    starved_ticks: int
    intervention_ticks: int
    policy_versions: list[int]
    failure: str | None


def write_eval_episodes(run_dir: Path, records: Sequence[EpisodeRecord]) -> Path:
    path = run_dir / EVAL_EPISODES
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in records))
    return path


def read_eval_episodes(run_dir: Path) -> list[EpisodeRecord]:
    return [EpisodeRecord.from_json(r) for r in read_json_lines(run_dir / EVAL_EPISODES)]


# -- an actor's progress, summary and audit --------------------------------------------------


@dataclass(frozen=True)
class ActorProgress(_Record):
    """What an actor rewrites after every episode: `robotrl launch` shows it, the demo plots
    its ``history``, the soak bench audits it."""

    episodes: int = 0
    successes: int = 0
    ticks: int = 0
    policy_version: int = -1
    """The newest policy version executed (-1: none yet)."""
    last_success: bool = False
    backlog: int = 0
    rows_sent: int = 0
    """Rows handed to the transport."""
    refused_rows: int = 0
    missed_deadlines: int = 0
    time: float = 0.0
    taken_over: int = 0
    """Episodes a person (or the sim's scripted takeover) drove for a while."""
    history: list[list[int]] = field(default_factory=list)
    """Per episode: [success with no intervention (0/1), newest policy version executed]."""

    def policy_successes(self) -> list[int]:
        """Per episode, 1 when the policy succeeded on its own (learning curves)."""
        return [int(success) for success, _ in self.history]

    def versions(self) -> list[int]:
        """Per episode, the newest policy version executed."""
        return [int(version) for _, version in self.history]


def write_actor_progress(run_dir: Path, actor_id: str, progress: ActorProgress) -> None:
    replace_json(actor_progress_path(run_dir, actor_id), progress.to_json())


def read_actor_progress(run_dir: Path, actor_id: str) -> ActorProgress | None:
    record = read_json_object(actor_progress_path(run_dir, actor_id))
    return None if record is None else ActorProgress.from_json(record)


def every_actor_progress(run_dir: Path) -> Iterator[ActorProgress]:
    """The progress of every actor of ``run_dir``, in the order of their ids."""
    for path in sorted(run_dir.glob(_ACTOR_PROGRESS.format("*"))):
        record = read_json_object(path)
        if record is not None:
            yield ActorProgress.from_json(record)


def write_actor_summary(run_dir: Path, actor_id: str, summary: EvalSummary) -> Path:
    """An actor's summary: the eval summary's figures and its transport's (``transport``)."""
    return write_json(actor_summary_path(run_dir, actor_id), summary, indent=2)


def read_actor_summary(run_dir: Path, actor_id: str) -> EvalSummary:
    return cast(EvalSummary, json.loads(actor_summary_path(run_dir, actor_id).read_text()))


@dataclass(frozen=True)
class SentRecord(_Record):
    """``actor.audit_sent``: rows one actor incarnation's transport numbered and kept on
    ``stream``, up to the batch ``seq``."""

    stream: str
    rows: int
    seq: int


def write_sent_record(run_dir: Path, actor_id: str, record: SentRecord) -> None:
    replace_json(actor_sent_path(run_dir, actor_id), record.to_json())


def read_sent_record(run_dir: Path, actor_id: str) -> SentRecord | None:
    record = read_json_object(actor_sent_path(run_dir, actor_id))
    return None if record is None else SentRecord.from_json(record)


# -- the learner's metrics -------------------------------------------------------------------


def read_learner_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """Every metrics record of the learner of ``run_dir`` (none before its first)."""
    return read_json_lines(run_dir / LEARNER_METRICS)


def last_learner_metrics(run_dir: Path) -> dict[str, Any] | None:
    """The learner's newest metrics record while it runs, or None."""
    return last_json_line(run_dir / LEARNER_METRICS)


# -- launch status ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RoleStatus(_Record):
    """One role of a launch run: its process and what it last reported."""

    role: str
    pid: int | None = None
    state: str = ""
    restarts: int = 0
    uptime_s: float | None = None
    last_exit: int | None = None
    log: str = ""
    progress: dict[str, Any] = field(default_factory=dict)
    """The role's own record: the learner's newest metrics, an actor's :class:`ActorProgress`."""


@dataclass(frozen=True)
class LaunchStatus:
    time: float
    roles: list[RoleStatus]

    def to_json(self) -> dict[str, Any]:
        return {"time": self.time, "roles": [r.to_json() for r in self.roles]}

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> LaunchStatus:
        roles = record.get("roles")
        rows = roles if isinstance(roles, list) else []
        return cls(
            float(record.get("time", 0.0)),
            [RoleStatus.from_json(r) for r in rows if isinstance(r, dict) and "role" in r],
        )


def write_launch_status(run_dir: Path, roles: Sequence[RoleStatus]) -> None:
    """The status of every role now, replaced atomically (tests and tools read it while launch runs)."""
    replace_json(
        run_dir / LAUNCH_STATUS, LaunchStatus(round(time.time(), 3), list(roles)).to_json(), indent=1
    )


def read_launch_status(run_dir: Path) -> LaunchStatus | None:
    record = read_json_object(run_dir / LAUNCH_STATUS)
    return None if record is None else LaunchStatus.from_json(record)


# -- an experiment's steps and results -------------------------------------------------------


@dataclass(frozen=True)
class StepStamp(_Record):
    """What made a step's output: its command (without the interpreter), the runs that made its
    inputs (None: an input not made), an id of this run, and its wall time."""

    argv: list[str]
    inputs: dict[str, str | None]
    run: str
    seconds: float = 0.0


def write_step_stamp(out_dir: Path, stamp: StepStamp) -> None:
    write_json(out_dir / STEP_STAMP, stamp.to_json(), indent=1)


def read_step_stamp(out_dir: Path) -> StepStamp | None:
    record = read_json_object(out_dir / STEP_STAMP)
    if record is None or not {"argv", "inputs", "run"} <= record.keys():
        return None
    return StepStamp.from_json(record)


def write_demo_results(out_dir: Path, results: Mapping[str, Any]) -> Path:
    """The demo's results (:meth:`robotrl.experiment.demo.Demo.results`)."""
    return write_json(out_dir / RESULTS, results, indent=2)


def read_demo_results(out_dir: Path) -> dict[str, Any]:
    results: dict[str, Any] = json.loads((out_dir / RESULTS).read_text())
    return results


@dataclass(frozen=True)
class SweepResults(_Record):
    """The latency sweep: its policies (one per pretraining seed), one row per (latency, strategy)
    pooled over them, and one per policy's cell (``policy``: its index), finished so far."""

    policies: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    seed_rows: list[dict[str, Any]] = field(default_factory=list)


def write_sweep_results(out_dir: Path, results: SweepResults) -> Path:
    return write_json(out_dir / RESULTS, results.to_json(), indent=1)


def read_sweep_results(out_dir: Path) -> SweepResults:
    return SweepResults.from_json(json.loads((out_dir / RESULTS).read_text()))
