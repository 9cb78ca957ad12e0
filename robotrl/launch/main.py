"""`robotrl launch [overrides]`: a learner and N actors on this host, from one Hydra config.

Every role is a real `robotrl <role>` process given the same overrides (each actor gets
its own ``actor.actor_id`` and seed), with its output in ``run_dir/logs/<role>.log``.
The health table shows each role's state, restarts and progress; a crashed role is
restarted (an actor resends what it spooled, a learner resumes from its checkpoint).

Shutdown, on Ctrl-C or when the work is done: the actors first (each finishes its
episode, so the arm ends holding still, and flushes its transitions), then the learner
(which writes a checkpoint). A second Ctrl-C kills everything at once.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from types import FrameType

from rich.console import Console
from rich.live import Live

from robotrl.config.load import ConfigError, load_config
from robotrl.config.schema import RobotRLConfig
from robotrl.core import run_folder
from robotrl.core.quiet import quiet_variables
from robotrl.core.run_folder import RoleStatus
from robotrl.launch.status import describe_progress, snapshot, table
from robotrl.launch.supervisor import RoleSpec, State, Supervisor

EXIT_USAGE = 2
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130
_PER_ACTOR_KEYS = ("actor.actor_id", "actor.seed")


def role_command(role: str, overrides: Sequence[str], ranks: int = 1, logs: Path | None = None) -> list[str]:
    """The command line of one role (this interpreter, so no PATH lookup can pick another install);
    with ``ranks`` above 1, its ranks under torchrun on this host (a free rendezvous port), whose
    own files go to ``logs`` (else torchrun leaves a folder in the system's temporary one per start)."""
    cli = ["-m", "robotrl.cli", role, *overrides]
    if ranks == 1:
        return [sys.executable, *cli]
    torchrun = ["-m", "robotrl.learner.torchrun", "--standalone", f"--nproc-per-node={ranks}"]
    if logs is not None:
        torchrun.append(f"--log-dir={logs}")
    return [sys.executable, *torchrun, *cli]


def build_specs(cfg: RobotRLConfig, overrides: Sequence[str]) -> list[RoleSpec]:
    """The learner (when asked) and ``launch.actors`` actors, each with its log file."""
    shared = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in _PER_ACTOR_KEYS]
    run_dir = Path(cfg.run_dir)
    env = {"COLUMNS": "160", "PYTHONUNBUFFERED": "1", **quiet_variables(os.environ)}
    specs = []
    if cfg.launch.learner:
        learner_env = {**env, **_threads(cfg.launch.learner_threads)}
        specs.append(
            RoleSpec(
                "learner",
                role_command(
                    "learner", shared, cfg.launch.learner_ranks, logs=run_dir / run_folder.LOGS / "torchrun"
                ),
                run_folder.role_log(run_dir, "learner"),
                learner_env,
            )
        )
    for i in range(cfg.launch.actors):
        actor_id = f"actor-{i}"
        seed = cfg.actor.seed + i * cfg.launch.actor_seed_stride
        argv = role_command("actor", [*shared, f"actor.actor_id={actor_id}", f"actor.seed={seed}"])
        actor_env = {**env, **_threads(cfg.launch.actor_threads)}
        specs.append(RoleSpec(actor_id, argv, run_folder.role_log(run_dir, actor_id), actor_env))
    return specs


def _threads(n: int) -> dict[str, str]:
    """Environment that caps torch's intra-op (OpenMP/MKL) threads; empty for the default."""
    return {} if n == 0 else {"OMP_NUM_THREADS": str(n), "MKL_NUM_THREADS": str(n)}


class Launch:
    """The supervisor loop with its display and the shutdown order."""

    def __init__(self, cfg: RobotRLConfig, specs: Sequence[RoleSpec], console: Console) -> None:
        self.cfg = cfg
        self.run_dir = Path(cfg.run_dir)
        self.console = console
        la = cfg.launch
        self.supervisor = Supervisor(specs, la.max_restarts, la.restart_backoff_s, on_event=self._event)
        self.actors = [s.name for s in specs if s.name != "learner"]
        self.has_learner = any(s.name == "learner" for s in specs)
        self._interrupts = 0

    def _event(self, message: str) -> None:
        self.console.log(message)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self._interrupts += 1
        if self._interrupts == 1:
            self.console.log(f"launch: {signal.Signals(signum).name}: stopping the actors, then the learner")
        else:
            raise KeyboardInterrupt  # the second Ctrl-C: no more waiting

    def _finished(self) -> str | None:
        """Why the run is over, or None while it goes on.

        Finite roles (actors with ``actor.episodes``, a learner with ``learner.max_groups``)
        are waited for; a role that runs until stopped is stopped once the finite ones are done.
        """
        states = self.supervisor.states()
        if self._interrupts:
            return "interrupted"
        if self.supervisor.any_failed():
            return "a role failed"
        actors_done = bool(self.actors) and all(states[a] is State.done for a in self.actors)
        learner_done = self.has_learner and states["learner"] is State.done
        actors_finite = self.cfg.actor.episodes > 0
        learner_finite = self.cfg.learner.max_groups > 0
        if actors_done and (learner_done or not self.has_learner or not learner_finite):
            return "every actor finished its episodes"
        if learner_done and (not self.actors or not actors_finite):
            return "the learner finished its update groups"
        return None

    def _rows(self) -> list[RoleStatus]:
        rows = snapshot(self.supervisor.children, self.run_dir, time.monotonic())
        run_folder.write_launch_status(self.run_dir, rows)
        return rows

    def run(self) -> int:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        title = f"robotrl launch: {self.run_dir}  (logs in {self.run_dir / run_folder.LOGS}; Ctrl-C stops)"
        reason = None
        try:
            self.supervisor.start()
            live = Live(table(self._rows(), title), console=self.console, auto_refresh=False)
            plain = not self.console.is_terminal
            next_status = time.monotonic()
            with live if not plain else nullcontext():
                while (reason := self._finished()) is None:
                    self.supervisor.poll()
                    if time.monotonic() >= next_status:
                        rows = self._rows()
                        if plain:
                            self._print_plain(rows)
                        else:
                            live.update(table(rows, title), refresh=True)
                        next_status = time.monotonic() + self.cfg.launch.status_every_s
                    time.sleep(0.2)
            self.console.log(f"launch: {reason}; shutting down")
            self.shutdown()
        except KeyboardInterrupt:
            self.console.log("launch: second interrupt, killing every role")
            self.supervisor.kill_all()
            reason = "killed"
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        rows = self._rows()
        self.console.print(table(rows, f"robotrl launch: {reason}"))
        if self.supervisor.any_failed() or reason == "killed":
            return EXIT_FAILED
        # Stopped cleanly, but before the work was done: callers must not take it as finished.
        return EXIT_INTERRUPTED if reason == "interrupted" else 0

    def shutdown(self) -> None:
        """Actors first (they finish their episode and flush), then the learner (checkpoint)."""
        timeout = self.cfg.launch.shutdown_timeout_s
        if self.actors:
            self.supervisor.stop(self.actors, timeout)
        if self.has_learner:
            self.supervisor.stop(["learner"], timeout)

    def _print_plain(self, rows: list[RoleStatus]) -> None:
        parts = []
        for r in rows:
            desc = describe_progress(r.role, r.progress)
            parts.append(f"{r.role} [{r.state}, restarts {r.restarts}]: {desc}")
        self.console.log("  |  ".join(parts))


def main(args: Sequence[str]) -> int:
    """The `robotrl launch` role (raw overrides: each role gets them too)."""
    if any(a in ("-h", "--help") for a in args):
        from robotrl.cli import config_help

        print(f"robotrl launch: a learner and launch.actors actors on this host\n\n{config_help()}")
        return 0
    try:
        cfg = load_config(args, role="launch")
    except ConfigError as exc:
        print(f"robotrl launch: {exc}", file=sys.stderr)
        return EXIT_USAGE
    console = Console(stderr=True)
    specs = build_specs(cfg, args)
    for spec in specs:
        console.log(f"{spec.name}: {' '.join(spec.argv[1:])}  > {spec.log_path}")
    return Launch(cfg, specs, console).run()
