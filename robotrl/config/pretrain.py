"""The ``pretrain`` group: `robotrl pretrain`'s behaviour cloning from demonstrations."""

from __future__ import annotations

from dataclasses import dataclass, field

from robotrl.config.bounds import bounds


@dataclass
class PretrainConfig:
    steps: int = field(default=20_000, metadata=bounds(gt=0))
    """Gradient steps of behaviour cloning."""
    batch_size: int = field(default=64, metadata=bounds(gt=0))
    """Chunks per gradient step."""
    lr: float = field(default=3.0e-4, metadata=bounds(gt=0))
    """Peak AdamW learning rate (linear warm-up, then cosine decay)."""
    warmup_steps: int = field(default=500, metadata=bounds(ge=0))
    """Steps of linear learning-rate warm-up."""
    weight_decay: float = field(default=1.0e-4, metadata=bounds(ge=0))
    """AdamW weight decay."""
    val_fraction: float = field(default=0.1, metadata=bounds(ge=0, lt=1))
    """Share of episodes held out for the validation loss (the last ones); 0 trains on every
    episode (the validation loss is then taken on training episodes)."""
    state_noise: float = field(default=0.0, metadata=bounds(ge=0, le=1, note="standard deviations"))
    """Gaussian noise added to each training state, in standard deviations of that feature in
    the training data (augmentation; validation and inference see clean states)."""
    image_shift: int = field(default=4, metadata=bounds(ge=0, note="pixels; 0: off"))
    """Shift each training camera image by up to this many pixels on each axis (DrQ's random
    shift, robotrl/policy/augment.py); validation and inference see the images as recorded.
    The learner's ``learner.image_shift`` does the same while fine-tuning."""
    hold_after_success: bool = False
    """Train the chunk rows past the end of an episode that ended in success as holding its last
    action (the sim ends an episode at success; masked, the policy never learns to stay there)."""
    val_every: int = field(default=500, metadata=bounds(gt=0))
    """Steps between validation losses."""
    val_batches: int = field(default=8, metadata=bounds(gt=0))
    """Batches in one validation pass (fixed samples and noise, so passes compare)."""
    checkpoint_every: int = field(default=1000, metadata=bounds(gt=0))
    """Steps between checkpoints (run_dir/policy, run_dir/policy_best, resume state)."""
    keep_every: int = field(default=0, metadata=bounds(ge=0, note="0: none"))
    """Also keep the policy at every multiple of this many steps, in run_dir's snapshots folder
    (``run_folder.PRETRAIN_SNAPSHOTS``), never replaced: the demo chooses the pretraining budget
    among them by success on validation seeds. 0: keep none."""
    ema: float = field(default=0.0, metadata=bounds(ge=0, lt=1, note="0: no average"))
    """Decay of a running average of the weights, per step (0.999: about the last 1000 steps);
    the checkpoints and the validation loss are the average's. 0: the last iterate. The
    learner's ``policy_ema`` does the same while fine-tuning."""
    resume: bool = True
    """Continue from run_dir's resume state when it exists."""
    threads: int = field(default=0, metadata=bounds(ge=0))
    """torch intra-op threads on CPU; 0 keeps torch's default."""
