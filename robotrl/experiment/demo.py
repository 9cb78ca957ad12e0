"""`robotrl experiment experiment=demo`: the sim fine-tuning demo that `make demo` runs.

1. record scripted demonstrations of the task (``robotrl record``),
2. pretrain the policy by behaviour cloning (``robotrl pretrain``),
3. evaluate it on fixed seeds (``robotrl eval``),
4. fine-tune it online in each run of ``experiment.algorithms`` (RAPI; BC on the same
   buffers; BC on the demonstrations alone, which is continued imitation) with a real
   learner and real actors (``robotrl launch``) in virtual time under the configured
   latency, with the same budget (online episodes and update groups) for each, and
   ``experiment.repeats`` times with other seeds (all algorithms' first runs come first),
5. evaluate each fine-tuned policy on the same seeds, pooling an algorithm's runs,
6. record a rerun view of the fine-tuned policy, plot the learning curves, and write
   the before/after table and ``results.json``.

Every step is cached in ``experiment.output_dir``; a second run redoes only what is
missing. The numbers are measured on the run, never assumed.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from robotrl.actor.report import outcome_text, pool_summaries
from robotrl.config.env import TakeoverConfig
from robotrl.config.experiment import FINETUNE_RUNS, demo_online_seeds, demo_seed_problems
from robotrl.config.load import problems_error
from robotrl.config.policy import PolicyKind
from robotrl.config.schema import RobotRLConfig
from robotrl.core.types import OUTCOME_SUCCESS
from robotrl.experiment.parallel import Job, JobDone, run_parallel
from robotrl.experiment.progress import LaunchProgress, launch_finished
from robotrl.experiment.steps import (
    STAMP,
    StepFailedError,
    Steps,
    config_overrides,
    is_cached,
    may_continue,
    ran_every_episode,
    robotrl,
    run_id,
    step_key,
)

RESULTS = "results.json"
CURVE = "learning_curve.png"
RECORDING = "demo.rrd"
RUN_GROUPS = ("env", "policy", "actor", "learner", "transport")
POLICY_FIGURES = (
    "episodes",
    "success_rate",
    "ci95",
    "runs",
    "mean_time_to_success_s",
    "jerk_rms",
    "starved_ticks",
)
"""What results.json keeps of each policy's evaluation (``runs``: a fine-tuned policy's per-run success)."""


class Demo:
    def __init__(self, cfg: RobotRLConfig, console: Console) -> None:
        self.cfg = cfg
        self.ex = cfg.experiment
        self.out = Path(self.ex.output_dir)
        self.console = console
        # record, pretrain, eval, (launch + eval) per algorithm and run, rerun
        self.steps = Steps(3 + 2 * len(self.ex.algorithms) * self.ex.repeats + 1, console)

    # -- paths -------------------------------------------------------------------------

    @property
    def demos(self) -> Path:
        return self.out / "demos"

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

    def _offline(self, **changes: Any) -> RobotRLConfig:
        """:meth:`_variant` for every step but fine-tuning: no scripted takeover
        (``env.takeover``), so evaluations measure the policy alone and turning
        takeovers on or off reuses the demonstrations, pretraining and evaluations."""
        return self._variant(env__takeover=TakeoverConfig(), **changes)

    def _eval_noise_scale(self) -> float:
        """The evaluations' inference temperature: ``experiment.eval_noise_scale``, else the policy's."""
        scale = self.ex.eval_noise_scale
        return self.cfg.policy.noise_scale if scale is None else scale

    def _evaluation(self, **changes: Any) -> RobotRLConfig:
        """:meth:`_offline` at the evaluations' inference temperature."""
        return self._offline(policy__noise_scale=self._eval_noise_scale(), **changes)

    def _sockets(self, name: str) -> Path:
        """A short, stable folder for ipc sockets (ipc paths are limited to ~100 bytes)."""
        digest = hashlib.sha1(str((self.out / name).resolve()).encode()).hexdigest()[:10]
        path = Path(tempfile.gettempdir()) / f"robotrl-{digest}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    # -- steps -------------------------------------------------------------------------

    def record(self) -> None:
        """The record group travels whole, so ``record.miss_rate`` and the noise options reach it."""
        cfg = self._offline(
            policy__kind=PolicyKind.expert,
            record__episodes=self.ex.demos,
            record__output_dir=str(self.demos),
            record__overwrite=True,
        )
        argv = robotrl("record", *config_overrides(cfg, ["env", "policy", "record"]), f"seed={self.cfg.seed}")
        self.steps.run(f"record {self.ex.demos} expert demonstrations of {self.cfg.env.id}", self.demos, argv)

    def pretrain(self) -> None:
        cfg = self._offline(policy__path=None, pretrain__steps=self.ex.pretrain_steps)
        run_dir = self.out / "pretrain"
        argv = robotrl(
            "pretrain",
            *config_overrides(cfg, ["env", "policy", "pretrain"]),
            f"dataset={self.demos}",
            f"run_dir={run_dir}",
            f"seed={self.cfg.seed}",
        )
        size, steps = cfg.policy.size.value, self.ex.pretrain_steps
        title = f"pretrain the {size} policy ({steps} steps of behaviour cloning)"
        if not may_continue(run_dir, argv, [self.demos], growing="pretrain.steps="):
            shutil.rmtree(run_dir)  # new demonstrations or settings: resuming would keep the old training
        self.steps.run(title, run_dir, argv, inputs=[self.demos])

    def evaluate(self, name: str, policy: Path, label: str, made_by: Path) -> dict[str, Any]:
        """Evaluate ``policy``, which the step with output folder ``made_by`` wrote."""
        title, out, argv = self.evaluation_step(name, policy, label)
        self.steps.run(title, out, argv, inputs=[made_by])
        return self._evaluation_summary(out)

    def evaluation_step(self, name: str, policy: Path, label: str) -> tuple[str, Path, list[str]]:
        """(title, output folder, command) of the evaluation ``name`` of ``policy`` (`robotrl eval`)."""
        cfg = self._evaluation(
            policy__path=str(policy),
            actor__episodes=self.ex.eval_episodes,
            actor__seed=self.ex.eval_seed,
        )
        out = self.eval_dir(name)
        argv = robotrl("eval", *config_overrides(cfg, ["env", "policy", "actor"]), f"run_dir={out}")
        return f"evaluate {label} on {self.ex.eval_episodes} fixed seeds", out, argv

    def _evaluation_summary(self, out: Path) -> dict[str, Any]:
        summary: dict[str, Any] = json.loads((out / "eval_summary.json").read_text())
        if summary["episodes"] != self.ex.eval_episodes:  # stopped early (Ctrl-C): not a result
            (out / STAMP).unlink(missing_ok=True)
            raise StepFailedError(f"{out}: {summary['episodes']} of {self.ex.eval_episodes} episodes ran")
        return summary

    def finetune_config(self, algorithm: str, run: int = 0) -> RobotRLConfig:
        """The config of run ``run`` (from 0) of the fine-tuning ``algorithm`` of :data:`FINETUNE_RUNS`;
        each run has its own online episode seeds (and, in :meth:`finetune`, learner seed)."""
        name = self.run_name(algorithm, run)
        out = self.finetune_dir(name)
        sockets = self._sockets(f"finetune_{name}")
        kind, learner_fields = FINETUNE_RUNS[algorithm]
        return self._variant(
            policy__path=str(self.pretrained),
            actor__episodes=self.ex.online_episodes,
            actor__seed=demo_online_seeds(self.cfg, run, 0),
            learner__algorithm=kind,
            **{f"learner__{field}": value for field, value in learner_fields.items()},
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
            f"latency {_latency(self.cfg)})"
        )
        if not (out / STAMP).exists():
            shutil.rmtree(out, ignore_errors=True)  # a half-finished run starts over
        return title, out, argv

    def finetune(self, algorithm: str, run: int = 0) -> Path:
        """Run ``algorithm``'s fine-tuning run ``run`` in the foreground; returns its policy."""
        title, out, argv = self.finetune_step(algorithm, run)
        self.steps.run(title, out, argv, inputs=self._finetune_inputs)
        return self._exported(out)

    def finetune_side_by_side(self) -> None:
        """Every fine-tuning run (every algorithm's first run, then the second, ...),
        ``experiment.finetune_workers`` at a time, each in the background with its output in its
        folder; each leaves its policy there. A failed or interrupted run stops the others."""
        inputs = tuple((str(p), run_id(p)) for p in self._finetune_inputs)
        jobs: dict[str, Job] = {}
        for algorithm, run in self._runs_in_order:
            title, out, argv = self.finetune_step(algorithm, run)
            name = self.run_name(algorithm, run)
            jobs[name] = Job(title, out, tuple(argv), inputs, complete=launch_finished)
        running = {name: job.out_dir for name, job in jobs.items()}
        with LaunchProgress(running, self.console):
            self._side_by_side(list(jobs.values()), "fine-tuning runs", "; their progress every 30 s")
        for job in jobs.values():
            self._exported(job.out_dir)

    def evaluate_side_by_side(self) -> dict[str, list[dict[str, Any]]]:
        """Evaluate every fine-tuned policy, ``experiment.finetune_workers`` at a time (each
        evaluation is one single-threaded process); returns each algorithm's summaries by run."""
        jobs: dict[tuple[str, int], Job] = {}
        whole = functools.partial(ran_every_episode, episodes=self.ex.eval_episodes)
        for algorithm, run in self._runs_in_order:
            name = self.run_name(algorithm, run)
            made_by = self.finetune_dir(name)
            label = f"the {algorithm}-fine-tuned policy{self._of_runs(run)}"
            title, out, argv = self.evaluation_step(name, self._exported(made_by), label)
            inputs = ((str(made_by), run_id(made_by)),)
            jobs[algorithm, run] = Job(title, out, tuple(argv), inputs, complete=whole)
        self._side_by_side(list(jobs.values()), "evaluations", "")
        runs: dict[str, list[dict[str, Any]]] = {a: [] for a in self.ex.algorithms}
        for (algorithm, _), job in jobs.items():
            runs[algorithm].append(self._evaluation_summary(job.out_dir))
        return runs

    def _side_by_side(self, jobs: list[Job], what: str, progress: str) -> None:
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
        return min(self.ex.finetune_workers, len(self.ex.algorithms) * self.ex.repeats)

    @property
    def _finetune_inputs(self) -> list[Path]:
        return [self.out / "pretrain", self.demos]

    def _exported(self, run_dir: Path) -> Path:
        """The fine-tuned policy of ``run_dir``, exported from its learner checkpoint once."""
        policy = run_dir / "policy"
        if not policy.exists():
            export_policy(self.pretrained, run_dir, policy)
        return policy

    def rerun_view(self, policy: Path, label: str) -> Path | None:
        path = self.out / RECORDING
        if self.ex.rerun_episodes == 0:
            return None
        stamp = self.out / ".rerun_stamp"
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

        cfg = self._evaluation(
            policy__path=str(policy),
            actor__episodes=self.ex.rerun_episodes,
            actor__seed=self.ex.eval_seed,
        )
        observer = RerunObserver(path, application_id="robotrl-demo")
        try:
            run_episodes(cfg, sink=None, title="rerun", observer=observer)
        finally:
            observer.close()
        stamp.write_text(key)
        return path

    # -- the whole demo ----------------------------------------------------------------

    def run(self) -> int:
        start = time.perf_counter()
        self.out.mkdir(parents=True, exist_ok=True)
        self._intro()
        self.record()
        self.pretrain()
        evals = {
            "pretrained": self.evaluate(
                "pretrained", self.pretrained, "the pretrained policy", made_by=self.out / "pretrain"
            )
        }
        if self.finetune_workers > 1:
            self.finetune_side_by_side()
            runs = self.evaluate_side_by_side()
        else:
            runs = {a: [] for a in self.ex.algorithms}
            for algorithm, run in self._runs_in_order:
                name = self.run_name(algorithm, run)
                policy = self.finetune(algorithm, run)
                label = f"the {algorithm}-fine-tuned policy{self._of_runs(run)}"
                runs[algorithm].append(self.evaluate(name, policy, label, made_by=self.finetune_dir(name)))
        evals.update({algorithm: pool_summaries(summaries) for algorithm, summaries in runs.items()})
        best = "rapi" if "rapi" in runs else self.ex.algorithms[0]
        recording = self.rerun_view(self.finetune_dir(best) / "policy", f"the {best}-fine-tuned policy")
        from robotrl.experiment.plots import learning_curves

        every_run = {
            self.run_name(a, run): self.finetune_dir(self.run_name(a, run))
            for a in self.ex.algorithms
            for run in range(self.ex.repeats)
        }
        curve = learning_curves(every_run, evals, self.out / CURVE)
        results = self.results(evals, time.perf_counter() - start)
        (self.out / RESULTS).write_text(json.dumps(results, indent=2))
        self._report(evals, results, curve, recording)
        return 0

    def _runs_each(self) -> str:
        return f", {self.ex.repeats} runs each (pooled)" if self.ex.repeats > 1 else ""

    def _of_runs(self, run: int) -> str:
        """`` (run 2 of 3)`` when the experiment repeats its fine-tuning runs, else nothing."""
        return f" (run {run + 1} of {self.ex.repeats})" if self.ex.repeats > 1 else ""

    def results(self, evals: dict[str, dict[str, Any]], wall_s: float) -> dict[str, Any]:
        def rate(name: str) -> float | None:
            return evals[name]["success_rate"] if name in evals else None

        ci = {name: evals[name]["ci95"] for name in evals}

        def rapi_beats(baseline: str) -> bool | None:
            if "rapi" not in ci or baseline not in ci:
                return None
            return bool(ci["rapi"][0] > ci[baseline][1])  # the intervals do not overlap

        ci95 = {
            "before": ci["pretrained"],
            "after": ci.get("rapi"),
            "bc": ci.get("bc"),
            "bc_demos": ci.get("bc_demos"),
        }
        return {
            "success_before": rate("pretrained"),
            "success_after": rate("rapi"),
            "success_bc": rate("bc"),
            "success_bc_demos": rate("bc_demos"),
            "ci95": ci95,
            "episodes": self.ex.eval_episodes,
            "repeats": self.ex.repeats,
            "wall_s": round(wall_s, 1),
            "rapi_beats_bc_beyond_ci": rapi_beats("bc"),
            "rapi_beats_bc_demos_beyond_ci": rapi_beats("bc_demos"),
            "per_policy": {
                name: {k: e[k] for k in POLICY_FIGURES if k in e} | {"outcomes": e.get("outcomes", {})}
                for name, e in evals.items()
            },
            "setting": {
                "env": self.cfg.env.id,
                "cameras": list(self.cfg.env.cameras),
                "privileged_state": self.cfg.env.privileged_state,
                "policy_size": self.cfg.policy.size.value,
                "strategy": self.cfg.actor.strategy.value,
                "noise_scale": {"online": self.cfg.policy.noise_scale, "eval": self._eval_noise_scale()},
                "latency": _latency(self.cfg),
                "control_hz": self.cfg.env.control_hz,
                "demos": self.ex.demos,
                "pretrain_steps": self.ex.pretrain_steps,
                "online_episodes_per_actor": self.ex.online_episodes,
                "actors": self.ex.actors,
                "update_groups": self.ex.update_groups,
                "eval_seeds": [self.ex.eval_seed, self.ex.eval_seed + self.ex.eval_episodes - 1],
            },
            "step_seconds": self.steps.seconds,
            "cached_steps": self.steps.cached,
        }

    def _intro(self) -> None:
        c, ex = self.cfg, self.ex
        cams = ", ".join(c.env.cameras) if c.env.cameras else "none (state only)"
        self.console.rule("[bold]robotrl demo: online fine-tuning in the sim")
        self.console.print(
            f"task {c.env.id} at {c.env.control_hz:g} Hz; cameras: {cams}; "
            f"privileged object pose in the state: {c.env.privileged_state}\n"
            f"policy: built-in flow policy, size {c.policy.size.value}, chunks of {c.policy.horizon}; "
            f"strategy {c.actor.strategy.value} under {_latency(c)} inference latency (virtual time)\n"
            f"budget per algorithm: {ex.actors} actor(s) x {ex.online_episodes} online episodes, "
            f"{ex.update_groups} learner update groups{self._runs_each()}; "
            f"evaluation on {ex.eval_episodes} fixed seeds\n"
            f"artefacts in {self.out} (delete it to start over; finished steps are reused)"
        )

    def _report(
        self, evals: dict[str, dict[str, Any]], results: dict[str, Any], curve: Path, recording: Path | None
    ) -> None:
        repeats = self.ex.repeats
        pooled = f", fine-tuned policies pooled over {repeats} runs each" if repeats > 1 else ""
        table = Table(
            title=f"{self.cfg.env.id}: {self.ex.eval_episodes} fixed-seed episodes per policy{pooled}, "
            f"noise scale {self._eval_noise_scale():g}"
        )
        columns = ["policy", "success", "95% CI", *(["per run"] if repeats > 1 else [])]
        # per episode: a pooled row counts K times the episodes of the pretrained one
        for col in (*columns, "time to success", "jerk RMS", "starved ticks / episode"):
            table.add_column(col, justify="right" if col != "policy" else "left")
        names = {
            "pretrained": "pretrained (BC on demos)",
            "rapi": "+ online RAPI",
            "bc": "+ online BC on RAPI's buffers",
            # the anchor it reads holds the takeovers' segments beside the demos (HG-DAgger's data)
            "bc_demos": "+ BC on the demos and takeovers"
            if self.cfg.env.takeover.enabled
            else "+ BC on the demos only",
        }
        for name, e in evals.items():
            lo, hi = e["ci95"]
            tts = e["mean_time_to_success_s"]
            table.add_row(
                names.get(name, name),
                f"{e['success_rate']:.0%}",
                f"{lo:.0%}-{hi:.0%}",
                *([", ".join(f"{r:.1%}" for r in e.get("runs", []))] if repeats > 1 else []),
                "-" if tts is None else f"{tts:.2f} s",
                f"{e['jerk_rms']:.0f}",
                f"{e['starved_ticks'] / e['episodes']:.2f}",
            )
        self.console.print(table)
        failures = {name: e["outcomes"] for name, e in evals.items() if e.get("outcomes")}
        if failures:  # evaluations cached before outcomes were counted have none
            self.console.print("how the failed episodes ended:")
            for name, outcomes in failures.items():
                failed = outcome_text(outcomes, skip=OUTCOME_SUCCESS)
                self.console.print(f"  {names.get(name, name)} (of {evals[name]['episodes']}): {failed}")
        for baseline in ("bc", "bc_demos"):
            if "rapi" in evals and baseline in evals:
                self.console.print(
                    f"RAPI vs {names[baseline].removeprefix('+ ')} under the same budget: "
                    + _compare(evals["rapi"]["ci95"], evals[baseline]["ci95"])
                )
        self.console.print(
            f"results: {self.out / RESULTS}\nlearning curves: {curve}\n"
            + (f"rerun recording: {recording}  (open with: rerun {recording})\n" if recording else "")
            + f"logs of every role: {self.out}/finetune_*/logs/\ntotal wall time {results['wall_s']:.0f} s"
        )


def _compare(rapi: list[float], baseline: list[float]) -> str:
    """How RAPI's 95% interval of success stands to a baseline's."""
    if rapi[0] > baseline[1]:
        return "RAPI is better beyond the 95% intervals."
    if rapi[1] < baseline[0]:
        return "RAPI is worse beyond the 95% intervals."
    return "the 95% intervals overlap; neither is better beyond them."


def _latency(cfg: RobotRLConfig) -> str:
    lat = cfg.actor.latency
    return f"{lat.kind.value} median {lat.median_s * 1e3:.0f} ms"


def export_policy(pretrained: Path, run_dir: Path, target: Path) -> None:
    """The learner's latest published weights on top of the pretrained checkpoint, saved as a
    policy checkpoint that `robotrl eval policy.path=...` loads."""
    from safetensors.numpy import load_file

    from robotrl.learner.checkpoint import Checkpointer
    from robotrl.policy import load_policy, save_policy

    latest = Checkpointer(run_dir).latest()
    if latest is None:
        raise RuntimeError(f"{run_dir}: the learner wrote no checkpoint (did it run any update group?)")
    policy = load_policy(pretrained)
    policy.load_weights(load_file(str(latest / "policy.safetensors")))
    save_policy(policy, target)


def run_demo(cfg: RobotRLConfig) -> int:
    wrong = demo_seed_problems(cfg)
    if wrong:
        raise problems_error(wrong)
    return Demo(cfg, Console()).run()
