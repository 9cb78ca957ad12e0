"""`robotrl pretrain dataset=<local LeRobotDataset> policy=flow_small`: behaviour cloning.

Trains the built-in flow policy on demonstration chunks with training-time RTC
(each chunk gets a random committed prefix of 0..max_delay actions), optionally with
Gaussian noise on the training states (``pretrain.state_noise``), camera images randomly
shifted by a few pixels (``pretrain.image_shift``) and the goal held after
successful episodes (``pretrain.hold_after_success``), reports a validation loss on
held-out episodes (``pretrain.val_fraction=0`` trains on every episode and validates on
them), and writes into ``run_dir``:

- ``policy/``: the latest checkpoint (what ``robotrl actor policy.path=...`` loads); with
  ``pretrain.ema`` the running average of the weights, validated as such,
- ``policy_best/``: the checkpoint with the lowest validation loss,
- with ``pretrain.keep_every``, the policy at each multiple of that many steps
  (``policy_snapshots.pretrain_snapshot``), kept for choosing a budget by success,
- ``pretrain_state/``: optimiser state and step (and the training iterate, with
  ``pretrain.ema``), so a rerun resumes,
- the pretraining metrics (``run_folder.PRETRAIN_METRICS``): one JSON line per validation.

Checkpoint directories are replaced atomically (written beside, then renamed), so
an interrupted run never leaves a half-written policy. Batches are drawn from a
generator seeded by (seed, step), and so are the flow noise and the image shifts, so a resumed run
trains exactly as the uninterrupted one would have.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from robotrl.config.policy import PolicyKind
from robotrl.config.pretrain import PretrainConfig
from robotrl.config.schema import RobotRLConfig
from robotrl.core.policy_snapshots import pretrain_snapshot
from robotrl.core.run_folder import PRETRAIN_METRICS, append_json_line
from robotrl.data.lerobot_dataset import DatasetError
from robotrl.policy.augment import shift_batch_images
from robotrl.policy.average import WeightAverage
from robotrl.policy.checkpoint import CheckpointError
from robotrl.policy.data import ChunkSampler, Demos, load_demos, split_episodes
from robotrl.policy.factory import load_policy, resolve_device
from robotrl.policy.flow import FlowChunkPolicy
from robotrl.policy.lerobot import LerobotChunkPolicy

STATE_DIR = "pretrain_state"
OPTIMIZER_FILE = "optimizer.pt"
ITERATE_FILE = "iterate.pt"
"""With ``pretrain.ema``, ``policy/`` holds the average; the training iterate resumes from here."""
TRAINER_FILE = "trainer.json"

console = Console(stderr=True)


def replace_dir(write: Any, target: Path) -> None:
    """Call ``write(tmp_dir)``, then swap ``tmp_dir`` in for ``target`` (never half-written)."""
    tmp, old = target.with_name(target.name + ".tmp"), target.with_name(target.name + ".old")
    shutil.rmtree(tmp, ignore_errors=True)
    write(tmp)
    if target.exists():
        shutil.rmtree(old, ignore_errors=True)
        target.rename(old)
    tmp.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def learning_rate(step: int, pt: PretrainConfig) -> float:
    if step < pt.warmup_steps:
        return pt.lr * (step + 1) / pt.warmup_steps
    progress = (step - pt.warmup_steps) / max(1, pt.steps - pt.warmup_steps)
    return pt.lr * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


Trainee = FlowChunkPolicy | LerobotChunkPolicy


def make_trainee(cfg: RobotRLConfig, demos: Demos) -> Trainee:
    """A fresh built-in flow policy, or (``policy.kind=lerobot``) the lerobot policy folder at
    ``policy.path`` trained on through lerobot's own processors and ``forward``."""
    torch.manual_seed(cfg.seed)
    if cfg.policy.kind is PolicyKind.lerobot:
        if not cfg.policy.path:
            raise CheckpointError(
                "policy.path: pretraining a lerobot policy starts from its folder (robotrl vla init)"
            )
        return LerobotChunkPolicy.load(cfg.policy.path, spec=demos.spec, cfg=cfg.policy)
    return FlowChunkPolicy(demos.spec, cfg.policy)


class Pretrainer:
    """Behaviour cloning of a chunk policy (the built-in flow policy or a lerobot one) from
    :class:`Demos`; a lerobot policy trains only its trainable parameters (a VLA's action expert)."""

    def __init__(self, cfg: RobotRLConfig, demos: Demos) -> None:
        self.cfg, self.pt = cfg, cfg.pretrain
        self.run_dir = Path(cfg.run_dir)
        self.device = resolve_device(cfg.policy.device)
        train_eps, val_eps = split_episodes(len(demos.episode_bounds), self.pt.val_fraction)
        train_frames = demos.frames_of(train_eps)
        self.policy = make_trainee(cfg, demos)
        self.policy.set_normalization(demos.stats(train_frames))
        self.policy.to(self.device)
        horizon, max_delay = self.policy.horizon, cfg.policy.max_delay
        hold = self.pt.hold_after_success
        noise = self.pt.state_noise
        self.train = ChunkSampler(
            demos, train_frames, horizon, max_delay, hold_after_success=hold, state_noise=noise
        )
        val_frames = demos.frames_of(val_eps or train_eps)
        self.val = ChunkSampler(demos, val_frames, horizon, max_delay, hold_after_success=hold)
        self.trained = [p for p in self.policy.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.trained, lr=self.pt.lr, weight_decay=self.pt.weight_decay)
        self.average = WeightAverage(self.trained, self.pt.ema) if self.pt.ema > 0 else None
        self.step = 0
        self.best_val = math.inf
        self.val_set = self._fixed_val_set()
        console.print(
            f"pretrain: {len(train_eps)} train / {len(val_eps)} validation episodes, "
            f"{len(train_frames)} train frames, {describe(self.policy)} on {self.device}"
        )

    def _fixed_val_set(self) -> list[dict[str, Any]]:
        rng = np.random.default_rng([self.cfg.seed, 1_000_003])
        return [self.val.batch(rng, self.pt.batch_size, self.device) for _ in range(self.pt.val_batches)]

    def averaged(self) -> AbstractContextManager[None]:
        """The weight average in the policy for the block (validation, saving); the training
        iterate is put back after it. Without ``pretrain.ema`` the policy as it is."""
        return nullcontext() if self.average is None else self.average.swapped_in()

    def loss(self, batch: dict[str, Any], seed: int) -> torch.Tensor:
        """The batch's mean loss, its flow noise drawn from ``seed`` (a lerobot policy draws it
        from torch's global generator, seeded here)."""
        if isinstance(self.policy, FlowChunkPolicy):
            noise = torch.Generator(device=self.device).manual_seed(seed)
            return self.policy.per_sample_loss(batch, generator=noise).mean()
        torch.manual_seed(seed)
        return self.policy.per_sample_loss(batch).mean()

    def validation_loss(self) -> float:
        self.policy.eval()
        with torch.no_grad():
            losses = [self.loss(b, self.cfg.seed + i).item() for i, b in enumerate(self.val_set)]
        self.policy.train()
        return float(np.mean(losses))

    def train_step(self) -> float:
        rng = np.random.default_rng([self.cfg.seed, self.step])
        batch = self.train.batch(rng, self.pt.batch_size, self.device)
        shifts = torch.Generator().manual_seed(self.cfg.seed * 1_000_033 + self.step)
        batch = shift_batch_images(batch, self.pt.image_shift, shifts)
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(self.step, self.pt)
        loss = self.loss(batch, self.cfg.seed * 1_000_003 + self.step)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(self.trained, 1.0)
        self.optimizer.step()
        if self.average is not None:
            self.average.update()
        self.step += 1
        return float(loss.item())

    # ------------------------------------------------------------------ persistence
    def save(self, val_loss: float | None) -> None:
        """``val_loss`` is the saved weights' (the average's, with ``pretrain.ema``)."""
        with self.averaged():
            replace_dir(self.policy.save, self.run_dir / "policy")
            if self.keeps(self.step):
                replace_dir(self.policy.save, pretrain_snapshot(self.run_dir, self.step))
            if val_loss is not None and val_loss < self.best_val:
                self.best_val = val_loss
                replace_dir(self.policy.save, self.run_dir / "policy_best")

        def write_state(tmp: Path) -> None:
            tmp.mkdir(parents=True)
            torch.save(self.optimizer.state_dict(), tmp / OPTIMIZER_FILE)
            if self.average is not None:
                torch.save(self.policy.state_dict(), tmp / ITERATE_FILE)
            state = {"step": self.step, "best_val": self.best_val, "seed": self.cfg.seed}
            (tmp / TRAINER_FILE).write_text(json.dumps(state) + "\n")

        replace_dir(write_state, self.run_dir / STATE_DIR)

    def keeps(self, step: int) -> bool:
        """Whether the policy at ``step`` is kept as a snapshot (``pretrain.keep_every``)."""
        return bool(self.pt.keep_every) and step % self.pt.keep_every == 0

    def try_resume(self) -> bool:
        """Load policy, optimiser and step from ``run_dir`` when a resume state is there."""
        state_dir = self.run_dir / STATE_DIR
        if not (state_dir / TRAINER_FILE).is_file():
            return False
        if self.cfg.policy.lora_rank:
            raise CheckpointError(
                f"run_dir={self.run_dir}: a LoRA pretraining does not resume (its saved policy holds "
                "the adapters merged): continue from it with policy.path in a new run_dir, or set "
                "pretrain.resume=false"
            )
        saved = load_policy(self.run_dir / "policy", self.device)
        if describe(saved) != describe(self.policy):
            raise CheckpointError(
                f"run_dir={self.run_dir}: holds a {describe(saved)}, this run trains a "
                f"{describe(self.policy)}; use another run_dir or pretrain.resume=false"
            )
        assert isinstance(saved, FlowChunkPolicy | LerobotChunkPolicy)
        self.policy.load_state_dict(saved.state_dict())
        self.policy.set_normalization(saved.normalization())
        if self.average is not None:  # policy/ holds the average; training goes on from the iterate
            self.average.load(self.trained)
            iterate = state_dir / ITERATE_FILE
            if iterate.is_file():  # else a run without an average: it starts from its weights
                self.policy.load_state_dict(torch.load(iterate, map_location=self.device, weights_only=True))
        optim_state = torch.load(state_dir / OPTIMIZER_FILE, map_location=self.device, weights_only=True)
        self.optimizer.load_state_dict(optim_state)
        trainer = json.loads((state_dir / TRAINER_FILE).read_text())
        self.step, self.best_val = int(trainer["step"]), float(trainer["best_val"])
        return True

    # ------------------------------------------------------------------ loop
    def run(self) -> dict[str, float]:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.pt.resume and self.try_resume():
            console.print(f"pretrain: resumed from {self.run_dir} at step {self.step}")
        metrics_file = self.run_dir / PRETRAIN_METRICS
        self.policy.train()
        last_loss, val_loss = math.nan, math.nan
        columns = (
            TextColumn("pretrain"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]:.4f}  val {task.fields[val]:.4f}"),
            TimeRemainingColumn(),
        )
        start = time.monotonic()
        with Progress(*columns, console=console) as progress:
            bar = progress.add_task(
                "train", total=self.pt.steps, completed=self.step, loss=math.nan, val=math.nan
            )
            while self.step < self.pt.steps:
                last_loss = self.train_step()
                done = self.step >= self.pt.steps
                checkpoint = done or self.step % self.pt.checkpoint_every == 0 or self.keeps(self.step)
                if done or checkpoint or self.step % self.pt.val_every == 0:
                    with self.averaged():
                        val_loss = self.validation_loss()
                    record = {
                        "step": self.step,
                        "loss": last_loss,
                        "val_loss": val_loss,
                        "lr": learning_rate(self.step - 1, self.pt),
                    }
                    append_json_line(metrics_file, record)
                if checkpoint:
                    self.save(val_loss)
                progress.update(bar, completed=self.step, loss=last_loss, val=val_loss)
        console.print(
            f"pretrain: step {self.step}, loss {last_loss:.4f}, validation {val_loss:.4f}, "
            f"{time.monotonic() - start:.0f} s; policy in {self.run_dir / 'policy'}"
        )
        return {"step": float(self.step), "loss": last_loss, "val_loss": val_loss}


def describe(policy: object) -> str:
    """What a run trains, in words: a resumed run must train the same."""
    if isinstance(policy, FlowChunkPolicy):
        return f"{policy.cfg.size.value} flow policy of horizon {policy.horizon}"
    if isinstance(policy, LerobotChunkPolicy):
        return f"lerobot {policy.config.type} policy of horizon {policy.horizon}"
    return type(policy).__name__


def delay_beyond_training(cfg: RobotRLConfig) -> str | None:
    """Why an actor with the configured latency model (``actor.latency``) would refuse the policy
    this pretraining makes: the prefix it would commit is longer than ``policy.max_delay``,
    the longest prefix training-time RTC shows the policy. None when it is covered."""
    from robotrl.sim.latency import build_latency_model, expected_delay_ticks

    try:
        model = build_latency_model(cfg.actor.latency)
    except (ValueError, FileNotFoundError):
        return None  # an empirical model without its profile: nothing to compare
    ticks = expected_delay_ticks(model, cfg.actor.delay_quantile, cfg.env.control_hz)
    if ticks <= cfg.policy.max_delay:
        return None
    lat = cfg.actor.latency
    return (
        f"policy.max_delay={cfg.policy.max_delay} is shorter than the {ticks} ticks the prefix strategy"
        f" commits under actor.latency {lat.kind.value}:{lat.median_s:g}; an actor with that latency will"
        f" refuse this policy (set policy.max_delay >= {ticks} to cover it)"
    )


def main(cfg: RobotRLConfig) -> int:
    """The `robotrl pretrain` role (a flow or lerobot policy: :mod:`robotrl.config.roles` refuses others)."""
    if not cfg.dataset:
        console.print("robotrl pretrain: dataset: set it to a local LeRobotDataset directory (dataset=/path)")
        return 2
    if cfg.pretrain.threads:
        torch.set_num_threads(cfg.pretrain.threads)
    uncovered = delay_beyond_training(cfg)
    if uncovered is not None:
        console.print(f"robotrl pretrain: warning: {uncovered}")
    try:
        demos = load_demos(cfg.dataset, cfg.env.cameras)
        if not cfg.env.privileged_state:
            hidden = demos.without_privileged_state()
            if hidden is not demos:
                dropped = sorted(set(demos.spec.state_names) - set(hidden.spec.state_names))
                console.print(f"pretrain: env.privileged_state=false: not reading {', '.join(dropped)}")
            demos = hidden
        Pretrainer(cfg, demos).run()
    except (DatasetError, CheckpointError) as exc:
        console.print(f"robotrl pretrain: {exc}")
        return 2
    return 0
