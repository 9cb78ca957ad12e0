"""`robotrl experiment experiment=demo`: the sim fine-tuning demo that `make demo` runs.

1. record scripted demonstrations of the task in the source condition (``robotrl record``),
2. pretrain the policy by behaviour cloning (``robotrl pretrain``), keeping candidate budgets
   (with ``experiment.vla``, a real VLA made offline first by ``robotrl vla init``),
3. choose the starting point among them by success on validation seeds in the target
   condition (``experiment.shift``) (``robotrl eval``; :mod:`robotrl.experiment.baselines`),
4. fine-tune it online in the target condition in each run of ``experiment.algorithms`` (RAPI;
   BC on the same buffers; HG-DAgger-style BC on the demonstrations and takeovers; RAPI without
   takeovers) with a real learner and real actors (``robotrl launch``) in virtual time under
   the configured latency, with the same budget (online episodes and update groups) for each,
   and ``experiment.repeats`` times with other seeds (all algorithms' first runs come first);
   beside them the offline control (the same number of updates on the demonstrations alone),
5. choose the best offline policy among the starting point and the control's snapshots on the
   validation seeds, and evaluate it, the control and each fine-tuned policy on the same fixed
   evaluation seeds, pooling an algorithm's runs,
6. record a rerun view of the fine-tuned policy, plot the learning curves, and write
   the results table (:func:`robotrl.core.run_folder.write_demo_results`).

Every step is cached in ``experiment.output_dir``; a second run redoes only what is
missing. The numbers are measured on the run, never assumed.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from robotrl.actor.report import pool_summaries
from robotrl.config.env import TakeoverConfig
from robotrl.config.experiment import (
    FINETUNE_RUNS,
    demo_online_seeds,
    demo_seed_problems,
    eval_noise_scale,
    shift_problems,
    target_scene,
    vla_problems,
)
from robotrl.config.load import problems_error
from robotrl.config.policy import PolicyKind
from robotrl.config.schema import RobotRLConfig
from robotrl.core import run_folder
from robotrl.core.run_folder import EvalSummary
from robotrl.experiment.baselines import (
    BEST_OFFLINE,
    CONTROL,
    BestOffline,
    best_with_control,
    choose_best_offline,
    control_snapshots,
    offline_control_job,
)
from robotrl.experiment.demo_results import (
    demo_results,
    latency_text,
    print_results,
    shift_text,
)
from robotrl.experiment.parallel import Job, JobDone, run_parallel
from robotrl.experiment.progress import LaunchProgress, launch_finished
from robotrl.experiment.steps import (
    StepFailedError,
    Steps,
    config_overrides,
    is_cached,
    key_of,
    may_continue,
    ran_every_episode,
    robotrl,
    run_id,
    step_key,
)

RUN_GROUPS = ("env", "policy", "actor", "learner", "transport")


class Demo:
    def __init__(self, cfg: RobotRLConfig, console: Console) -> None:
        self.cfg = cfg
        self.ex = cfg.experiment
        self.out = Path(self.ex.output_dir)
        self.console = console
        self.start = BestOffline(self.ex.pretrain_steps, self.pretrained, self.out / "pretrain", {})
        """The policy the fine-tunes and the control start from: the last pretrained one until
        :meth:`run` chooses among the pretraining's snapshots on the validation seeds."""
        self.best = self.start
        """The best offline policy, the baseline: :attr:`start` until :meth:`run` has validated
        the offline control's snapshots too."""
        self.target_scene = target_scene(cfg)
        """The deployment (target) condition: ``env.scene`` changed by ``experiment.shift``."""
        candidates = self.ex.pretrain_steps // self.ex.select_every if self.ex.select_every else 0
        # the control: train, validate its snapshots (when the pretraining's are), evaluate
        control = 2 + control_snapshots(self.cfg) * (candidates > 1) if self.ex.offline_control else 0
        # record, (make the VLA), pretrain, validations, eval, control, (launch + eval) per run, rerun
        runs = len(self.ex.algorithms) * self.ex.repeats
        made = 1 if self.ex.vla else 0
        self.steps = Steps(3 + made + candidates * (candidates > 1) + control + 2 * runs + 1, console)

    # -- paths -------------------------------------------------------------------------

    @property
    def demos(self) -> Path:
        return self.out / "demos"

    @property
    def vla_dir(self) -> Path:
        """The VLA folder ``experiment.vla`` pretraining starts from."""
        return self.out / "vla"

    @property
    def pretrained(self) -> Path:
        return self.out / "pretrain" / "policy"

    @staticmethod
    def run_name(algorithm: str, run: int) -> str:
        """``rapi`` for an algorithm's first fine-tuning run (``run`` 0), ``rapi-run2`` for the next."""
        return algorithm if run == 0 else f"{algorithm}-run{run + 1}"

    def finetune_dir(self, name: str) -> Path:
        """The folder of the fine-tuning run ``name`` (a :meth:`run_name`)."""
        return self.out / f"finetune_{name}"

    def eval_dir(self, name: str) -> Path:
        return self.out / f"eval_{name}"

    # -- configs of the steps ------------------------------------------------------------

    def _variant(self, **changes: Any) -> RobotRLConfig:
        """A copy of the config with ``group.field`` (written ``group__field``) changed."""
        cfg = copy.deepcopy(self.cfg)
        for key, value in changes.items():
            group, _, name = key.partition("__")
            setattr(getattr(cfg, group), name, value)
        return cfg

    def _source(self, **changes: Any) -> RobotRLConfig:
        """:meth:`_variant` for recording and pretraining: the source condition (``env.scene``),
        no scripted takeover, so turning takeovers on or off reuses the demonstrations."""
        return self._variant(env__takeover=TakeoverConfig(), **changes)

    def target_config(self, **changes: Any) -> RobotRLConfig:
        """:meth:`_variant` in the target condition (``experiment.shift`` applied)."""
        return self._variant(env__scene=copy.deepcopy(self.target_scene), **changes)

    def evaluation_config(self, policy: Path, episodes: int, seed: int) -> RobotRLConfig:
        """An evaluation of ``policy`` in the target condition: no takeover, so it measures the
        policy alone, at the evaluations' inference temperature."""
        return self.target_config(
            env__takeover=TakeoverConfig(),
            policy__noise_scale=eval_noise_scale(self.cfg),
            policy__path=str(policy),
            actor__episodes=episodes,
            actor__seed=seed,
        )

    def _sockets(self, name: str) -> Path:
        """A short, stable folder for ipc sockets (ipc paths are limited to ~100 bytes)."""
        digest = hashlib.sha1(str((self.out / name).resolve()).encode()).hexdigest()[:10]
        path = Path(tempfile.gettempdir()) / f"robotrl-{digest}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    # -- steps -------------------------------------------------------------------------

    def record(self) -> None:
        """The record group travels whole, so ``record.miss_rate`` and the noise options reach it."""
        cfg = self._source(
            policy__kind=PolicyKind.expert,
            record__episodes=self.ex.demos,
            record__output_dir=str(self.demos),
            record__overwrite=True,
        )
        argv = robotrl("record", *config_overrides(cfg, ["env", "policy", "record"]), f"seed={self.cfg.seed}")
        self.steps.run(f"record {self.ex.demos} expert demonstrations of {self.cfg.env.id}", self.demos, argv)

    def make_vla(self) -> None:
        """``experiment.vla`` made offline for the source condition (random weights)."""
        ex = self.ex
        cfg = self._source(policy__path=None)
        argv = robotrl(
            "vla",
            "init",
            f"--type={ex.vla}",
            f"--size={ex.vla_size}",
            f"--out={self.vla_dir}",
            f"--seed={self.cfg.seed}",
            *config_overrides(cfg, ["env"]),
            f"policy.horizon={cfg.policy.horizon}",
        )
        if not is_cached(self.vla_dir, key_of(argv, [])):
            shutil.rmtree(self.vla_dir, ignore_errors=True)  # `vla init` writes only into a new folder
        self.steps.run(f"make a {ex.vla_size} {ex.vla} offline (random weights)", self.vla_dir, argv)

    @property
    def _pretrain_inputs(self) -> list[Path]:
        return [self.demos, self.vla_dir] if self.ex.vla else [self.demos]

    def pretrain(self, seed_offset: int = 0) -> Path:
        """Pretrain on the demonstrations with seed ``seed + seed_offset``; returns the policy
        (:attr:`pretrained` for offset 0, else a folder of its own)."""
        ex = self.ex
        cfg = self._source(
            policy__path=str(self.vla_dir) if ex.vla else None,
            pretrain__steps=ex.pretrain_steps,
            pretrain__keep_every=ex.select_every,
        )
        seed = self.cfg.seed + seed_offset
        run_dir = self.out / ("pretrain" if seed_offset == 0 else f"pretrain_seed{seed}")
        argv = robotrl(
            "pretrain",
            *config_overrides(cfg, ["env", "policy", "pretrain"]),
            f"dataset={self.demos}",
            f"run_dir={run_dir}",
            f"seed={seed}",
        )
        size = f"{ex.vla_size} {ex.vla}" if ex.vla else f"{cfg.policy.size.value} policy"
        title = f"pretrain the {size} ({ex.pretrain_steps} steps of behaviour cloning"
        title += f", seed {seed})" if seed_offset else ")"
        if not may_continue(run_dir, argv, self._pretrain_inputs, growing="pretrain.steps="):
            shutil.rmtree(run_dir)  # new demonstrations or settings: resuming would keep the old training
        self.steps.run(title, run_dir, argv, inputs=self._pretrain_inputs)
        return run_dir / "policy"

    def evaluate(self, name: str, policy: Path, label: str, made_by: Path) -> EvalSummary:
        """Evaluate ``policy``, which the step with output folder ``made_by`` wrote."""
        title, out, argv = self.evaluation_step(name, policy, label)
        self.steps.run(title, out, argv, inputs=[made_by])
        return self._evaluation_summary(out)

    def evaluation_step(self, name: str, policy: Path, label: str) -> tuple[str, Path, list[str]]:
        """(title, output folder, command) of the evaluation ``name`` of ``policy`` (`robotrl eval`)."""
        cfg = self.evaluation_config(policy, self.ex.eval_episodes, self.ex.eval_seed)
        out = self.eval_dir(name)
        argv = robotrl("eval", *config_overrides(cfg, ["env", "policy", "actor"]), f"run_dir={out}")
        return f"evaluate {label} on {self.ex.eval_episodes} fixed seeds", out, argv

    def _evaluation_summary(self, out: Path) -> EvalSummary:
        summary = run_folder.read_eval_summary(out)
        if summary["episodes"] != self.ex.eval_episodes:  # stopped early (Ctrl-C): not a result
            (out / run_folder.STEP_STAMP).unlink(missing_ok=True)
            raise StepFailedError(f"{out}: {summary['episodes']} of {self.ex.eval_episodes} episodes ran")
        return summary

    def finetune_config(self, algorithm: str, run: int = 0) -> RobotRLConfig:
        """The config of run ``run`` (from 0) of the fine-tuning ``algorithm`` of :data:`FINETUNE_RUNS`;
        each run has its own online episode seeds (and, in :meth:`finetune`, learner seed)."""
        name = self.run_name(algorithm, run)
        out = self.finetune_dir(name)
        sockets = self._sockets(f"finetune_{name}")
        kind = FINETUNE_RUNS[algorithm]
        takeover = self.cfg.env.takeover if kind.takeovers else TakeoverConfig()
        return self.target_config(
            env__takeover=copy.deepcopy(takeover),
            policy__path=str(self.start.policy),
            actor__episodes=self.ex.online_episodes,
            actor__seed=demo_online_seeds(self.cfg, run, 0),
            learner__algorithm=kind.algorithm,
            **{f"learner__{field}": value for field, value in kind.learner.items()},
            learner__max_groups=self.ex.update_groups,
            learner__demos_path=str(self.demos),
            learner__resume=True,  # a learner restarted by launch continues from its checkpoint
            transport__transitions_endpoint=f"ipc://{sockets}/transitions",
            transport__weights_endpoint=f"ipc://{sockets}/weights",
            transport__spool_dir=str(out / "spool"),
        )

    def finetune_step(self, algorithm: str, run: int = 0) -> tuple[str, Path, list[str]]:
        """(title, output folder, command) of ``algorithm``'s fine-tuning run ``run`` (`robotrl launch`)."""
        out = self.finetune_dir(self.run_name(algorithm, run))
        cfg = self.finetune_config(algorithm, run)
        argv = robotrl(
            "launch",
            *config_overrides(cfg, RUN_GROUPS),
            f"launch.actors={self.ex.actors}",
            f"launch.actor_threads={self.cfg.launch.actor_threads}",
            f"launch.learner_threads={self.cfg.launch.learner_threads}",
            f"run_dir={out}",
            f"seed={self.cfg.seed + run}",
        )
        title = (
            f"fine-tune online with {algorithm}{self._of_runs(run)} ({self.ex.actors} actor(s) x "
            f"{self.ex.online_episodes} episodes, {self.ex.update_groups} update groups, "
            f"latency {latency_text(self.cfg)})"
        )
        if not is_cached(out, key_of(argv, self._finetune_inputs)):
            # a half-finished run, or one of other settings or inputs, starts over: its learner
            # would resume the old checkpoint and the old policy would be reported
            shutil.rmtree(out, ignore_errors=True)
        return title, out, argv

    def finetune(self, algorithm: str, run: int = 0) -> Path:
        """Run ``algorithm``'s fine-tuning run ``run`` in the foreground; returns its policy."""
        title, out, argv = self.finetune_step(algorithm, run)
        self.steps.run(title, out, argv, inputs=self._finetune_inputs)
        return self._exported(out)

    def evaluate_best_offline(self) -> EvalSummary:
        """Choose the best offline policy once the offline control has run, and evaluate it."""
        self.best = best_with_control(self, self.start)
        label = f"the best offline policy ({self.best.describe(self.cfg.learner.actor_updates_per_group)})"
        return self.evaluate(BEST_OFFLINE, self.best.policy, label, made_by=self.best.made_by)

    def offline_control(self) -> EvalSummary:
        """The offline control in the foreground, then its evaluation."""
        job = offline_control_job(self, self.start)
        self.steps.run(job.title, job.out_dir, job.argv, inputs=[self.start.made_by, self.demos])
        return self.evaluate(CONTROL, self._exported(job.out_dir), "the offline control", made_by=job.out_dir)

    def finetune_side_by_side(self) -> None:
        """The offline control and every fine-tuning run (every algorithm's first run, then the
        second, ...), ``experiment.finetune_workers`` at a time, each in the background with its
        output in its folder; each leaves its policy there. A failed or interrupted run stops the
        others."""
        inputs = tuple((str(p), run_id(p)) for p in self._finetune_inputs)
        jobs: dict[str, Job] = {}
        for algorithm, run in self._runs_in_order:
            title, out, argv = self.finetune_step(algorithm, run)
            name = self.run_name(algorithm, run)
            jobs[name] = Job(title, out, tuple(argv), inputs, complete=launch_finished)
        if self.ex.offline_control:  # last: the shortest, it fills a core once a fine-tune ends
            jobs[CONTROL] = offline_control_job(self, self.start)
        running = {name: job.out_dir for name, job in jobs.items() if name != CONTROL}
        with LaunchProgress(running, self.console):
            self.side_by_side(list(jobs.values()), "fine-tuning runs", "; their progress every 30 s")
        for job in jobs.values():
            self._exported(job.out_dir)

    def evaluate_side_by_side(self) -> dict[str, list[EvalSummary]]:
        """Evaluate the offline control and every fine-tuned policy, ``experiment.finetune_workers``
        at a time (each evaluation is one single-threaded process); returns each one's summaries
        by run."""
        jobs: dict[tuple[str, int], Job] = {}
        whole = functools.partial(ran_every_episode, episodes=self.ex.eval_episodes)
        runs_in_order = [(CONTROL, 0)] if self.ex.offline_control else []
        for algorithm, run in runs_in_order + self._runs_in_order:
            name = self.run_name(algorithm, run)
            made_by = self.finetune_dir(name)
            label = (
                "the offline control"
                if algorithm == CONTROL
                else f"the {algorithm}-fine-tuned policy{self._of_runs(run)}"
            )
            title, out, argv = self.evaluation_step(name, self._exported(made_by), label)
            inputs = ((str(made_by), run_id(made_by)),)
            jobs[algorithm, run] = Job(title, out, tuple(argv), inputs, complete=whole)
        self.side_by_side(list(jobs.values()), "evaluations", "")
        runs: dict[str, list[EvalSummary]] = {a: [] for a, _ in runs_in_order + self._runs_in_order}
        for (algorithm, _), job in jobs.items():
            runs[algorithm].append(self._evaluation_summary(job.out_dir))
        return runs

    def side_by_side(self, jobs: list[Job], what: str, progress: str) -> None:
        """Run ``jobs`` (steps of this demo) ``finetune_workers`` at a time with numbered headers."""
        heads = {job: self.steps.begin(job.title) for job in jobs}
        pending = [job for job in jobs if not is_cached(job.out_dir, step_key(job.argv, dict(job.inputs)))]
        for job in pending:
            self.console.print(f"{heads[job]}  ->  {job.out_dir}  (its output: {job.log})")
        if pending:
            self.console.print(f"{what}: {min(self.finetune_workers, len(pending))} at a time{progress}")

        def done(result: JobDone) -> None:
            job = result.job
            self.steps.finished(heads[job], job.title, job.out_dir, result.cached, result.seconds)

        run_parallel(jobs, self.finetune_workers, done)

    @property
    def _runs_in_order(self) -> list[tuple[str, int]]:
        """(algorithm, run) of every fine-tuning run: every algorithm's first run, then the second, ..."""
        return [(a, run) for run in range(self.ex.repeats) for a in self.ex.algorithms]

    @property
    def finetune_workers(self) -> int:
        """Fine-tuning runs at once: ``experiment.finetune_workers``, at most as many as there are
        (a lone run goes in the foreground, with launch's own status table)."""
        runs = len(self.ex.algorithms) * self.ex.repeats + self.ex.offline_control
        return min(self.ex.finetune_workers, runs)

    @property
    def _finetune_inputs(self) -> list[Path]:
        return [self.out / "pretrain", self.demos]

    def _exported(self, run_dir: Path) -> Path:
        """The fine-tuned policy of ``run_dir``, exported from its learner checkpoint once."""
        policy = run_dir / "policy"
        if not policy.exists():
            export_policy(self.start.policy, run_dir, policy)
        return policy

    def rerun_view(self, policy: Path, label: str) -> Path | None:
        path = self.out / run_folder.DEMO_RECORDING
        if self.ex.rerun_episodes == 0:
            return None
        stamp = self.out / run_folder.RECORDING_STAMP
        key = f"{policy}:{self.ex.rerun_episodes}:{run_id(policy.parent)}"  # a new fine-tune, a new view
        if path.exists() and stamp.exists() and stamp.read_text() == key:
            self.steps.note_cached(f"rerun recording of {label}", path)
            return path
        self.steps.done += 1
        self.console.print(
            f"[bold cyan][{self.steps.done}/{self.steps.total}][/] rerun recording of {label} "
            f"({self.ex.rerun_episodes} episodes)  ->  {path}"
        )
        from robotrl.actor.run import run_episodes
        from robotrl.viz.rerun import RerunObserver

        cfg = self.evaluation_config(policy, self.ex.rerun_episodes, self.ex.eval_seed)
        observer = RerunObserver(path, application_id="robotrl-demo")
        try:
            run_episodes(cfg, sink=None, title="rerun", observer=observer)
        finally:
            observer.close()
        stamp.write_text(key)
        return path

    # -- the whole demo ----------------------------------------------------------------

    def run(self) -> int:
        began = time.perf_counter()
        self.out.mkdir(parents=True, exist_ok=True)
        self._intro()
        self.record()
        if self.ex.vla:
            self.make_vla()
        self.pretrain()
        self.start = self.best = choose_best_offline(self)
        if self.finetune_workers > 1:
            self.finetune_side_by_side()
            evals = {BEST_OFFLINE: self.evaluate_best_offline()}
            runs = self.evaluate_side_by_side()
        else:
            runs = {a: [] for a in self.ex.algorithms}
            if self.ex.offline_control:
                runs = {CONTROL: [self.offline_control()], **runs}
            evals = {BEST_OFFLINE: self.evaluate_best_offline()}
            for algorithm, run in self._runs_in_order:
                name = self.run_name(algorithm, run)
                policy = self.finetune(algorithm, run)
                label = f"the {algorithm}-fine-tuned policy{self._of_runs(run)}"
                runs[algorithm].append(self.evaluate(name, policy, label, made_by=self.finetune_dir(name)))
        evals.update({algorithm: pool_summaries(summaries) for algorithm, summaries in runs.items()})
        shown = "rapi" if "rapi" in runs else self.ex.algorithms[0]
        recording = self.rerun_view(self.finetune_dir(shown) / "policy", f"the {shown}-fine-tuned policy")
        curve = self.learning_curve(evals)
        results = demo_results(self.cfg, evals, self.best, time.perf_counter() - began, self.steps)
        results["actor_updates"] = self.actor_updates(list(runs))
        results["sim_steps_per_s"] = self.sim_rate()
        run_folder.write_demo_results(self.out, results)
        print_results(self.console, self.cfg, evals, self.best, results, curve, recording)
        return 0

    def sim_rate(self) -> dict[str, Any]:
        """The task's env steps/s with the preset's cameras, measured once every step is done
        (nothing else runs): how much of a control tick simulation and rendering take."""
        from robotrl.bench.sim import measure
        from robotrl.sim.registry import task_of

        e = self.cfg.env
        env_rate, bare = measure(
            task_of(e.id), tuple(e.cameras), seconds=1.0, rounds=2, image_size=e.image_size
        )
        return {
            "cameras": list(e.cameras),
            "image_size": e.image_size,
            "env": round(env_rate, 1),
            "bare_mujoco": round(bare, 1),
        }

    def actor_updates(self, names: list[str]) -> dict[str, list[int | None]]:
        """The policy updates each run of ``names`` made, as its learner counted them (RAPI's
        first groups train only its critic, so it makes fewer than the control's budget)."""
        runs = {name: [self.run_name(name, run) for run in range(self.ex.repeats)] for name in names}
        if CONTROL in runs:
            runs[CONTROL] = [CONTROL]
        out: dict[str, list[int | None]] = {}
        for name, run_names in runs.items():
            lasts = [run_folder.last_learner_metrics(self.finetune_dir(r)) for r in run_names]
            out[name] = [None if m is None else int(m.get("actor_updates_total", 0)) for m in lasts]
        return out

    def learning_curve(self, evals: dict[str, EvalSummary]) -> Path:
        """Evaluate every fine-tuning run's policy snapshots on the curve's seeds (side by side,
        cached) and plot them with the offline baselines as lines."""
        from robotrl.experiment.curve import curve_jobs, curve_points
        from robotrl.experiment.plots import learning_curves

        every_run = {
            self.run_name(a, run): self.finetune_dir(self.run_name(a, run))
            for a in self.ex.algorithms
            for run in range(self.ex.repeats)
        }
        cfg = self.evaluation_config(self.start.policy, self.ex.curve_episodes, self.ex.curve_seed)
        jobs = [job for run_dir in every_run.values() for job in curve_jobs(cfg, run_dir, self.start.policy)]
        if jobs:
            self.steps.total += len(jobs)
            self.side_by_side(jobs, "learning-curve evaluations", "")
        names = {BEST_OFFLINE: "best offline", CONTROL: "offline control"}
        baselines = {
            label: (evals[name]["success_rate"], evals[name]["ci95"])
            for name, label in names.items()
            if name in evals
        }
        curves = {name: curve_points(run_dir) for name, run_dir in every_run.items()}
        path = self.out / run_folder.LEARNING_CURVE
        return learning_curves(every_run, evals, path, curves=curves, baselines=baselines)

    def _runs_each(self) -> str:
        return f", {self.ex.repeats} runs each (pooled)" if self.ex.repeats > 1 else ""

    def _of_runs(self, run: int) -> str:
        """`` (run 2 of 3)`` when the experiment repeats its fine-tuning runs, else nothing."""
        return f" (run {run + 1} of {self.ex.repeats})" if self.ex.repeats > 1 else ""

    def _intro(self) -> None:
        c, ex = self.cfg, self.ex
        cams = ", ".join(c.env.cameras) if c.env.cameras else "none (state only)"
        self.console.rule("[bold]robotrl demo: online fine-tuning in the sim")
        self.console.print(
            f"task {c.env.id} at {c.env.control_hz:g} Hz; cameras: {cams}; "
            f"privileged object pose in the state: {c.env.privileged_state}\n"
            f"{shift_text(c)}\n"
            f"policy: built-in flow policy, size {c.policy.size.value}, chunks of {c.policy.horizon}; "
            f"strategy {c.actor.strategy.value} under {latency_text(c)} inference latency (virtual time)\n"
            f"budget per algorithm: {ex.actors} actor(s) x {ex.online_episodes} online episodes, "
            f"{ex.update_groups} learner update groups{self._runs_each()}; "
            f"evaluation on {ex.eval_episodes} fixed seeds\n"
            f"artefacts in {self.out} (delete it to start over; finished steps are reused)"
        )


def export_policy(pretrained: Path, run_dir: Path, target: Path) -> None:
    """The learner's latest published weights on top of the pretrained checkpoint, saved as a
    policy checkpoint that `robotrl eval policy.path=...` loads."""
    from safetensors.numpy import load_file

    from robotrl.policy import load_policy, save_policy

    latest = run_folder.latest_checkpoint(run_dir)
    if latest is None:
        raise RuntimeError(f"{run_dir}: the learner wrote no checkpoint (did it run any update group?)")
    policy = load_policy(pretrained)
    policy.load_weights(load_file(str(latest / run_folder.CHECKPOINT_POLICY)))
    save_policy(policy, target)


def run_demo(cfg: RobotRLConfig) -> int:
    wrong = demo_seed_problems(cfg) + shift_problems(cfg) + vla_problems(cfg)
    if wrong:
        raise problems_error(wrong)
    return Demo(cfg, Console()).run()
