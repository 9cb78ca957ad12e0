"""The ``learner`` group: buffers, batches, schedule and checkpoints every algorithm shares,
and ``learner.rapi``: what only RAPI reads (its critic and its advantage weights).

Anchored behaviour cloning (``learner.algorithm=bc``) has no settings of its own: it is the
shared policy update with every sample weighted 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from robotrl.config.bounds import DEVICE, bounds


class AlgorithmKind(Enum):
    rapi = "rapi"  # replay-anchored policy improvement (critic + advantage-weighted actor)
    bc = "bc"  # anchored behaviour cloning only, the baseline


class AdvantageKind(Enum):
    td = "td"  # A = min Q(s, a) - V(s): the critic's in-sample estimate (RAPolicy)
    mc = "mc"  # A = return to go - V(s) once the episode ended; the td estimate until then


@dataclass
class RapiConfig:
    """RAPI's own settings: the in-sample critic and the advantage weights of the actor's loss."""

    expectile: float = field(default=0.7, metadata=bounds(gt=0, lt=1))
    """Expectile of V's regression on min Q."""
    beta: float = field(default=0.5, metadata=bounds(gt=0))
    """Advantage temperature: w = exp(clip(A / beta, -adv_clip, adv_clip))."""
    adv_clip: float = field(default=3.0, metadata=bounds(gt=0))
    """Clip of A / beta before the exponential."""
    weight_ess: float = field(default=0.0, metadata=bounds(ge=0, lt=1, note="0: the fixed beta"))
    """If > 0, choose beta per batch so the advantage weights' effective share of the batch's
    actor samples (Kish's ESS / n: 1 is BC) is this, instead of the fixed ``beta``. A fixed beta's
    share follows the advantages' scale (a takeover penalty drove it from 0.7 to 0.13)."""
    advantage: AdvantageKind = AdvantageKind.td
    """td: A = min Q - V. mc: A = the sample's discounted return to its episode's end - V (the
    td estimate while its episode is still running). With a sparse success reward and a
    near-deterministic policy, Q - V has little to tell apart; the outcome has."""
    intervention_penalty: float = field(default=0.0, metadata=bounds(ge=0))
    """Reward subtracted from the policy's last tick before a person takes over (RLIF): the
    takeover itself says the policy was going wrong. 0: interventions only add expert data."""
    critic_updates_per_group: int = field(default=20, metadata=bounds(gt=0))
    """Critic updates in one update group."""
    critic_warmup_updates: int = field(default=2560, metadata=bounds(ge=0))
    """Critic updates before the first actor update."""
    critic_images: bool = True
    """The critic reads the cameras through a small CNN as well as the state."""
    critic_hidden: int = field(default=256, metadata=bounds(gt=0))
    """Width of the critic's LayerNorm MLPs."""
    target_tau: float = field(default=0.005, metadata=bounds(gt=0, le=1))
    """Polyak step of the critic's target networks per critic update (> 0, or they never move)."""


@dataclass
class GuardConfig:
    """What the learner refuses at ingest (values no sane robot sends) and how long it tries to
    recover from updates that turn its networks non-finite before it stops."""

    reward_abs_max: float = field(default=1.0e3, metadata=bounds(gt=0))
    """A batch with a reward of larger magnitude is refused: finite but absurd rewards (3e38)
    overflow the critic to NaN."""
    state_abs_max: float = field(default=1.0e4, metadata=bounds(gt=0))
    """A batch with a state value (joint reading, pose) of larger magnitude is refused."""
    action_margin: float = field(default=0.1, metadata=bounds(ge=0))
    """Actions may lie this fraction of the action range outside the env's action bounds (a
    leader arm's reading may overshoot a little); beyond it the batch is refused."""
    max_nonfinite_groups: int = field(default=3, metadata=bounds(gt=0))
    """Consecutive update groups that end non-finite (each rolled back) before the learner stops
    with an error instead of publishing."""


@dataclass
class LearnerConfig:
    algorithm: AlgorithmKind = AlgorithmKind.rapi
    """Learning rule: rapi or bc."""
    batch_size: int = field(default=256, metadata=bounds(gt=0))
    """Samples per update on each rank, half online and half anchor (under torchrun, an update
    sees ``batch_size`` times the number of ranks)."""
    anchor_fraction: float = field(default=0.5, metadata=bounds(ge=0, le=1))
    """Share of each batch drawn from the anchor buffer."""
    gamma: float = field(default=0.99, metadata=bounds(gt=0, le=1))
    """Per-tick discount; a chunk of H ticks is discounted by gamma**H."""
    actor_updates_per_group: int = field(default=5, metadata=bounds(ge=0))
    """Policy updates in one update group (RAPI: after the critic's; BC: at least one)."""
    lr: float = field(default=3.0e-4, metadata=bounds(gt=0))
    """Adam learning rate of the critic (and of the policy when ``policy_lr`` is unset)."""
    policy_lr: float | None = field(default=None, metadata=bounds(gt=0))
    """Adam learning rate of the policy; None uses ``lr``. Fine-tuning a pretrained policy
    wants a smaller one than a critic learning from scratch."""
    policy_lr_end: float = field(default=1.0, metadata=bounds(ge=0, le=1, note="1: constant"))
    """The policy's learning rate after ``max_groups`` groups as a fraction of its first one,
    reached along a half cosine, as pretraining anneals: the last groups settle the policy
    instead of wandering at the full rate. 1: constant. Needs ``max_groups`` (without one the
    learner warns and keeps the rate constant)."""
    policy_ema: float = field(default=0.0, metadata=bounds(ge=0, lt=1))
    """Decay of a running (Polyak) average of the policy's weights, per actor update; the learner
    publishes and checkpoints the average instead of the last iterate (0.995: about the last
    200 updates). At a constant learning rate the last iterate wanders: two runs of one demo
    config scored 36% and 68%. 0: publish the last iterate."""
    online_capacity: int = field(default=200_000, metadata=bounds(gt=0))
    """Transitions the online buffer holds (at least 4 * policy.horizon)."""
    anchor_capacity: int = field(default=100_000, metadata=bounds(gt=0))
    """Ticks of intervention segments the anchor holds (demos and fastest successes are kept whole;
    at least 4 * policy.horizon)."""
    fastest_successes: int = field(default=20, metadata=bounds(ge=0))
    """Fastest successful episodes kept in the anchor buffer."""
    max_policy_lag: int | None = field(default=None, metadata=bounds(ge=0))
    """Drop samples older than this many policy versions; None keeps all."""
    max_samples_per_insert: float | None = field(default=None, metadata=bounds(gt=0))
    """Rate limit (as Reverb's): pause updates while samples drawn per transition ingested exceed it."""
    demos_path: str | None = field(default=None, metadata=bounds(nonblank=True))
    """Local LeRobotDataset of demonstrations for the anchor buffer."""
    checkpoint_every_groups: int = field(default=50, metadata=bounds(gt=0))
    """Write a checkpoint every this many update groups."""
    snapshot_every_groups: int = field(default=0, metadata=bounds(ge=0, note="0: none"))
    """Keep the published policy every this many update groups, at the first and at the last
    (<run_dir>/policy_snapshots, never rotated): the learning curve evaluates each. 0: none."""
    device: str = field(default="auto", metadata=DEVICE)
    """'auto' (CUDA with bf16 autocast when present), 'cpu' or 'cuda'."""
    prefetch_batches: int | None = field(default=None, metadata=bounds(ge=0))
    """Batches drawn ahead in a background thread; None: 2 on CUDA, 0 (inline) on the CPU."""
    shard_policy: bool = False
    """Under torchrun, shard the policy's trainable parameters, their gradients, Adam moments
    and average over the ranks (FSDP2, for a policy one device cannot train) instead of
    replicating them (DDP); a frozen backbone and the critic stay whole on each rank. Every
    rank takes part in each publish and checkpoint, and a checkpoint still holds the policy
    whole: it resumes on any number of ranks, sharded or not. docs/architecture.md. No effect
    on one rank."""
    torch_threads: int = field(default=0, metadata=bounds(ge=0, note="0: torch's default"))
    """Torch intra-op CPU threads of the learner; 0 keeps torch's default (one per core)."""
    grad_clip: float = field(default=10.0, metadata=bounds(gt=0))
    """Gradient norm clip of every network."""
    image_shift: int = field(default=4, metadata=bounds(ge=0, note="pixels; 0: off"))
    """Shift each sampled camera image by up to this many pixels on each axis (DrQ's random
    shift, robotrl/policy/augment.py) before the critic and the policy see it; never at
    inference. Pretraining has its own, ``pretrain.image_shift``. No effect without cameras."""
    learning_starts: int = field(default=256, metadata=bounds(ge=0))
    """Chunk samples ready (online + anchor) before the first update group."""
    storage_dir: str | None = None
    """Folder of the memory-mapped image storage; None for a temporary folder."""
    success_reward: float = 1.0
    """Reward on a demonstration's last frame when its dataset has no next.reward."""
    max_groups: int = field(default=0, metadata=bounds(ge=0, note="0: until stopped"))
    """Stop after this many update groups in this run; 0 runs until stopped."""
    log_every_groups: int = field(default=10, metadata=bounds(gt=0))
    """Console and JSON-lines metrics every this many update groups."""
    save_buffers: bool = True
    """Checkpoint the online buffer, intervention segments and fastest successes, and journal
    every batch received since the last checkpoint (<run_dir>/journal) before acknowledging it,
    so a killed learner loses nothing it acknowledged. false: smaller, faster checkpoints, but a
    restarted learner starts from empty buffers and acknowledged batches die with the process."""
    journal_max_mb: int = field(default=4096, metadata=bounds(gt=0))
    """Disk budget of the journal; a batch beyond it is not acknowledged (the actor resends it)."""
    fsync: bool = True
    """fsync journal files, checkpoints and their folders, so they survive a power cut, not just
    a killed learner; false trades that for the disk's sync latency per batch and checkpoint."""
    resume: bool = True
    """Resume from the latest checkpoint in run_dir when there is one. Either way the policy
    versions continue above the newest one published in run_dir (``checkpoints/published_version``)."""
    offline: bool = False
    """Train on ``demos_path`` alone: no links, no actors, no online row; exactly ``max_groups``
    update groups of the configured algorithm, then stop. The demo's offline control: a
    fine-tune's update budget without its online data."""
    rerun: bool = False
    """Also record metrics to <run_dir>/learner.rrd (open with `rerun learner.rrd`)."""
    rapi: RapiConfig = field(default_factory=RapiConfig)
    """RAPI's critic and advantage weights (BC reads none of them)."""
    guard: GuardConfig = field(default_factory=GuardConfig)
    """Value checks at ingest and the non-finite update guard."""
