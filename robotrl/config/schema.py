"""Hydra structured configs: one dataclass per group, a docstring per field.

The YAML files under ``configs/`` are presets over these dataclasses; Hydra checks
their types, and :func:`problems` checks values (ranges, combinations), so a bad
value fails at start with a message that names the field.

Groups: ``env``, ``policy``, ``actor``, ``learner``, ``transport``. Every role
composes the same root :class:`RobotRLConfig` and reads the groups it needs.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any


class Strategy(Enum):
    """How the actor merges a new chunk with the one it is executing."""

    sync = "sync"  # stop and wait for every chunk (the baseline that pauses the robot)
    naive_async = "naive_async"  # switch to the new chunk at its first future tick
    blend = "blend"  # weighted merge of old and new on the overlap
    prefix = "prefix"  # real-time chunking: the policy continues the committed prefix


class LatencyKind(Enum):
    """Inference-time model used in virtual time (ignored in wall-clock mode)."""

    constant = "constant"
    normal = "normal"  # mean median_s, standard deviation sigma * median_s
    lognormal = "lognormal"
    spike_mixture = "spike_mixture"
    empirical = "empirical"


class AlgorithmKind(Enum):
    rapi = "rapi"  # replay-anchored policy improvement (critic + advantage-weighted actor)
    bc = "bc"  # anchored behaviour cloning only, the baseline


FINETUNE_RUNS: dict[str, tuple[AlgorithmKind, dict[str, Any]]] = {
    "rapi": (AlgorithmKind.rapi, {}),
    "bc": (AlgorithmKind.bc, {}),
    # Continued imitation: the same budget of BC updates on the demonstrations alone (and any
    # human interventions), none of the policy's own episodes, so no reward selects what it imitates.
    "bc_demos": (AlgorithmKind.bc, {"anchor_fraction": 1.0, "fastest_successes": 0}),
}
"""The fine-tuning runs `experiment.algorithms` may list: name -> (learner.algorithm, learner fields)."""


class AdvantageKind(Enum):
    td = "td"  # A = min Q(s, a) - V(s): the critic's in-sample estimate (RAPolicy)
    mc = "mc"  # A = return to go - V(s) once the episode ended; the td estimate until then


class PolicyKind(Enum):
    flow = "flow"  # robotrl's built-in flow-matching chunk policy
    lerobot = "lerobot"  # a lerobot pretrained policy through the adapter
    expert = "expert"  # the sim's scripted expert of the task (robotrl.sim.experts); record only


class PolicySize(Enum):
    tiny = "tiny"  # about 0.3M parameters, for tests and the latency sweep
    mini = "mini"  # about 1M, the CPU fine-tuning demo
    small = "small"  # about 10M, camera policies
    base = "base"  # 50-100M, for a GPU


@dataclass
class EnvConfig:
    id: str = "robotrl/SO101Reach-v0"
    """Gymnasium id of the task (registered under the robotrl/ namespace)."""
    control_hz: float = 30.0
    """Control rate: one action per tick."""
    max_episode_ticks: int = 300
    """Time limit; the episode is truncated after this many ticks."""
    cameras: list[str] = field(default_factory=lambda: ["front", "wrist"])
    """Camera observations to render; empty for state only."""
    image_size: int = 96
    """Square camera resolution in pixels."""
    privileged_state: bool = False
    """Add the object pose to the state (sim only)."""
    tip_position: bool = False
    """Add the fingertip's position (x, y, z in metres, the arm's forward kinematics) to the
    state, after everything else: a small policy then need not learn the kinematics to place
    the jaws to the centimetre (sim only)."""
    domain_randomization: bool = True
    """Seeded randomisation of object pose, friction, mass, colours, light, cameras."""
    dense_reward: bool = False
    """Add a dense shaping term in [-1, 0] to the sparse success reward."""
    expert_takeover_ticks: int = 0
    """Sim only: once an episode has run this many ticks without success, the task's scripted
    expert takes over to its end, as a person with a leader arm would, and the actor records
    those ticks as interventions (the learner's anchor keeps them). 0: never. Evaluations in
    `robotrl experiment` always run without it."""
    expert_takeover_on_miss: bool = False
    """Sim, pick-and-place only: the moment the policy's jaws have closed on nothing while the
    cube is on the table, the scripted expert takes over, grasps it again and hands back once it
    has lifted it (once per episode), as a person correcting a missed grasp would; recorded as
    interventions. Evaluations in `robotrl experiment` always run without it."""
    expert_takeover_miss_wait_ticks: int = 0
    """With ``expert_takeover_on_miss``: the jaws must stay shut on nothing this many ticks in a
    row before the expert takes over (0: at once), as a person waits to see whether the robot
    tries again by itself. The state it was stuck in then starts the takeover, so the expert's
    re-opening is learned from states the policy really reaches."""
    expert_takeover_before_miss: bool = False
    """Sim, pick-and-place only: as ``expert_takeover_on_miss``, but the moment the policy's jaws
    start to close off the cube (more than 1 cm above its centre or 2 cm to one side), before
    the miss: the expert descends onto the cube, grasps it and hands back once it has lifted it."""
    expert_takeover_reopen_only: bool = False
    """With ``expert_takeover_on_miss`` or ``_before_miss``: the expert only pulls the jaws off the
    bad grasp and hands back once they are open above the cube; the policy grasps again by
    itself (its second try, not the expert's, is then in the fine-tuning data)."""
    expert_takeover_max_corrections: int = 1
    """With ``expert_takeover_on_miss`` or ``_before_miss``: grasps the expert corrects per
    episode at most. After the last one a policy that misses again stays stuck, and its
    shut-on-nothing ticks fill the buffers the learner imitates."""

    @property
    def scripted_takeover(self) -> bool:
        """Whether any ``expert_takeover_*`` field lets the scripted expert take over."""
        return bool(
            self.expert_takeover_ticks or self.expert_takeover_on_miss or self.expert_takeover_before_miss
        )


@dataclass
class PolicyConfig:
    kind: PolicyKind = PolicyKind.flow
    """Built-in flow policy or a lerobot policy through the adapter."""
    size: PolicySize = PolicySize.small
    """Size preset of the built-in policy."""
    horizon: int = 32
    """Actions per chunk (H)."""
    max_delay: int = 12
    """Largest committed prefix (ticks) seen in training; prefix conditioning holds up to here."""
    flow_steps: int = 5
    """Integration steps of the flow-matching head at inference."""
    noise_scale: float = 1.0
    """Inference temperature of the flow policy: its integration starts from Gaussian noise times
    this. 1 samples the learned distribution; lower values pick likelier chunks (0: the same chunk
    for the same observation). Training is unaffected."""
    path: str | None = None
    """Local directory of pretrained weights (robotrl checkpoint or lerobot policy); None for fresh."""
    device: str = "auto"
    """'auto' (CUDA when present), 'cpu' or 'cuda'."""


@dataclass
class LatencyConfig:
    kind: LatencyKind = LatencyKind.lognormal
    """Shape of the inference-time distribution."""
    median_s: float = 0.15
    """Median inference time in seconds (constant: the value itself)."""
    sigma: float = 0.3
    """Log-space standard deviation (lognormal, spike_mixture); std relative to median_s (normal)."""
    spike_prob: float = 0.02
    """Probability of a spike (spike_mixture)."""
    spike_s: float = 0.6
    """Duration of a spike in seconds (spike_mixture)."""
    profile_path: str | None = None
    """Latency profile file recorded by `robotrl profile-latency` (empirical)."""


@dataclass
class ActorConfig:
    actor_id: str = "actor-0"
    """Name of this actor in the transition stream; unique per learner."""
    strategy: Strategy = Strategy.prefix
    """Execution strategy for overlapping chunks."""
    virtual_time: bool = True
    """Sim only: no sleeping; the latency model decides how many ticks an inference takes."""
    latency: LatencyConfig = field(default_factory=LatencyConfig)
    """Latency model for virtual time."""
    delay_window: int = 50
    """Inferences remembered by the delay estimate (old spikes are forgotten)."""
    delay_quantile: float = 0.9
    """Quantile of recent delays used as the expected delay."""
    margin_ticks: int = 2
    """Start the next inference when actions left <= expected delay + margin. Two ticks cover the
    odd inference a little slower than the delay quantile (measured: 0 starved ticks in 60 s of
    `robotrl bench actor`, against 1-3 with one)."""
    refresh_on_new_weights: bool = True
    """Async strategies: ask for a chunk as soon as newer weights are loaded, instead of running
    out the current plan first (new weights act within one inference of arriving)."""
    execution_horizon: int = 0
    """Async strategies: ask for the next chunk once this many ticks have passed since the last
    request, however many planned actions are left (RTC's execution horizon s): the robot then
    acts on observations at most s + delay ticks old instead of up to a chunk old, at more
    inferences per second. 0: ask only when the plan runs low (or newer weights arrive)."""
    blend_decay: float = 0.5
    """blend: weight of the old chunk decays by this factor per overlapping tick."""
    episodes: int = 10
    """Episodes to run (eval) or 0 to run until stopped (online)."""
    versions_per_episode: float = 0.0
    """Virtual time, online: episode k starts once the learner has published policy version
    floor(k * this). Virtual time runs the robot as fast as the CPU allows, so an unpaced actor
    can finish every episode on its first weights; a real arm gets a fixed share of learner
    updates per episode, and this keeps that share in the sim, whatever the load. 0: no pace."""
    weights_wait_s: float = 120.0
    """versions_per_episode: longest wait for a version; after one timeout (a learner that has
    stopped publishing) the actor logs it and runs on unpaced."""
    seed: int = 0
    """Seed of the first episode; episode i uses seed + i."""
    max_inference_errors: int = 3
    """Consecutive inference errors before the actor stops cleanly."""
    rerun_path: str | None = None
    """Write a rerun recording (.rrd: cameras, joints, generated vs executed chunks, latency) here."""
    record_dataset: str | None = None
    """Record the episodes as a LeRobotDataset in this new folder, with the actor's stamps as
    extra columns (policy version, chunk id, delay, intervention, seed, tick); written off the
    control thread."""
    record_video: bool = False
    """record_dataset: encode camera frames as MP4 video (smaller, slower) instead of PNG images."""
    record_overwrite: bool = False
    """record_dataset: replace the folder when it exists."""
    audit_sent: bool = False
    """Rewrite <run_dir>/actor_<id>_sent.json after every batch the transport has numbered and
    kept (rows so far): what the soak bench audits after killing an actor. A small file write
    per batch, on the transport's thread."""


@dataclass
class LearnerConfig:
    algorithm: AlgorithmKind = AlgorithmKind.rapi
    """Learning rule: rapi or bc."""
    batch_size: int = 256
    """Samples per update, half online and half anchor."""
    anchor_fraction: float = 0.5
    """Share of each batch drawn from the anchor buffer."""
    gamma: float = 0.99
    """Per-tick discount; a chunk of H ticks is discounted by gamma**H."""
    expectile: float = 0.7
    """Expectile of V's regression on min Q."""
    beta: float = 0.5
    """Advantage temperature: w = exp(clip(A / beta, -adv_clip, adv_clip))."""
    adv_clip: float = 3.0
    """Clip of A / beta before the exponential."""
    weight_ess: float = 0.0
    """If > 0, choose beta per batch so the advantage weights' effective share of the batch's
    actor samples (Kish's ESS / n: 1 is BC) is this, instead of the fixed ``beta``. A fixed beta's
    share follows the advantages' scale (a takeover penalty drove it from 0.7 to 0.13)."""
    advantage: AdvantageKind = AdvantageKind.td
    """td: A = min Q - V. mc: A = the sample's discounted return to its episode's end - V (the
    td estimate while its episode is still running). With a sparse success reward and a
    near-deterministic policy, Q - V has little to tell apart; the outcome has."""
    intervention_penalty: float = 0.0
    """Reward subtracted from the policy's last tick before a person takes over (RLIF): the
    takeover itself says the policy was going wrong. 0: interventions only add expert data."""
    critic_updates_per_group: int = 20
    """Critic updates in one update group."""
    actor_updates_per_group: int = 5
    """Actor updates in one update group (after the critic's)."""
    critic_warmup_updates: int = 2560
    """Critic updates before the first actor update."""
    lr: float = 3.0e-4
    """Adam learning rate of the critic (and of the policy when ``policy_lr`` is unset)."""
    policy_lr: float | None = None
    """Adam learning rate of the policy; None uses ``lr``. Fine-tuning a pretrained policy
    wants a smaller one than a critic learning from scratch."""
    policy_lr_end: float = 1.0
    """The policy's learning rate after ``max_groups`` groups as a fraction of its first one,
    reached along a half cosine, as pretraining anneals: the last groups settle the policy
    instead of wandering at the full rate. 1: constant. Needs ``max_groups`` (without one the
    learner warns and keeps the rate constant)."""
    policy_ema: float = 0.0
    """Decay of a running (Polyak) average of the policy's weights, per actor update; the learner
    publishes and checkpoints the average instead of the last iterate (0.995: about the last
    200 updates). At a constant learning rate the last iterate wanders: two runs of one demo
    config scored 36% and 68%. 0: publish the last iterate."""
    online_capacity: int = 200_000
    """Transitions the online buffer holds."""
    anchor_capacity: int = 100_000
    """Ticks of intervention segments the anchor holds (demos and fastest successes are kept whole)."""
    fastest_successes: int = 20
    """Fastest successful episodes kept in the anchor buffer."""
    max_policy_lag: int | None = None
    """Drop samples older than this many policy versions; None keeps all."""
    max_samples_per_insert: float | None = None
    """Rate limit (as Reverb's): pause updates while samples drawn per transition ingested exceed it."""
    demos_path: str | None = None
    """Local LeRobotDataset of demonstrations for the anchor buffer."""
    checkpoint_every_groups: int = 50
    """Write a checkpoint every this many update groups."""
    device: str = "auto"
    """'auto' (CUDA with bf16 autocast when present), 'cpu' or 'cuda'."""
    prefetch_batches: int | None = None
    """Batches drawn ahead in a background thread; None: 2 on CUDA, 0 (inline) on the CPU."""
    torch_threads: int = 0
    """Torch intra-op CPU threads of the learner; 0 keeps torch's default (one per core)."""
    critic_images: bool = True
    """The critic reads the cameras through a small CNN as well as the state."""
    critic_hidden: int = 256
    """Width of the critic's LayerNorm MLPs."""
    target_tau: float = 0.005
    """Polyak step of the critic's target networks per critic update."""
    grad_clip: float = 10.0
    """Gradient norm clip of every network."""
    learning_starts: int = 256
    """Chunk samples ready (online + anchor) before the first update group."""
    storage_dir: str | None = None
    """Folder of the memory-mapped image storage; None for a temporary folder."""
    success_reward: float = 1.0
    """Reward on a demonstration's last frame when its dataset has no next.reward."""
    max_groups: int = 0
    """Stop after this many update groups in this run; 0 runs until stopped."""
    log_every_groups: int = 10
    """Console and JSON-lines metrics every this many update groups."""
    save_buffers: bool = False
    """Also checkpoint the online buffer, intervention segments and fastest successes (large).
    Also turns on the write-ahead journal (<run_dir>/journal) of batches received since the last
    checkpoint, so a killed learner loses nothing it acknowledged."""
    journal_max_mb: int = 4096
    """Disk budget of the journal; batches beyond it are kept in memory only (logged and counted)."""
    resume: bool = True
    """Resume from the latest checkpoint in run_dir when there is one."""
    rerun: bool = False
    """Also record metrics to <run_dir>/learner.rrd (open with `rerun learner.rrd`)."""


@dataclass
class TransportConfig:
    transitions_endpoint: str = "tcp://127.0.0.1:5555"
    """Where the learner receives transitions (ZeroMQ endpoint: tcp://host:port or ipc://path)."""
    weights_endpoint: str = "tcp://127.0.0.1:5556"
    """Where the learner publishes weights."""
    batch_transitions: int = 64
    """Transitions per batch on the wire."""
    heartbeat_s: float = 1.0
    """Heartbeat period on every link."""
    peer_timeout_s: float = 5.0
    """A peer silent this long is declared dead."""
    max_inflight_batches: int = 256
    """Unacknowledged batches held in memory before spooling to disk."""
    spool_dir: str = "runs/spool"
    """Directory of the disk spool used while the learner is away."""
    spool_max_mb: int = 2048
    """Disk spool budget; beyond it batches are dropped and counted."""
    write_ahead: bool = True
    """Every batch goes to the spool before it is sent (deleted when acknowledged), so an actor
    killed and restarted with the same id resends what the learner had not acknowledged."""
    weights_subset: str = "trainable"
    """'trainable' (only the trained tensors) or 'full'."""
    send_window: int = 16
    """Transition batches sent and not yet acknowledged at once (credit-based flow control)."""
    weights_piece_mb: int = 16
    """Weight updates travel in pieces of about this many MB (a larger tensor goes alone)."""
    curve: bool = False
    """CURVE authentication and encryption (for links that cross hosts)."""
    keys_dir: str = "keys"
    """Directory of CURVE key pairs written by `robotrl keys generate`."""


@dataclass
class RecordConfig:
    episodes: int = 10
    """Episodes to record."""
    output_dir: str = "data/demos"
    """Local directory the LeRobotDataset is written to (must not exist yet, unless overwrite)."""
    repo_id: str = "local/so101_demos"
    """Dataset name stored in its metadata (never pushed to a hub)."""
    expert_noise: float = 0.0
    """Scripted expert: std of the Gaussian noise on its targets, as a share of the action range."""
    dart_noise: float = 0.0
    """DART: std of Gaussian noise added to the executed command only, as a share of the action
    range; the recorded action stays the expert's clean command, so the data shows recoveries."""
    video: bool = False
    """Encode camera frames as MP4 video (smaller, slower) instead of PNG images."""
    overwrite: bool = False
    """Replace an existing output_dir."""
    keep_failures: bool = True
    """Also save episodes in which the task was not solved."""
    miss_rate: float = 0.0
    """Pick-and-place: share of episodes whose first grasp is executed aimed off the cube by
    about ``miss_offset``, while the recorded action stays the clean expert's; the expert then
    grasps again, so the data shows how to recover from a missed grasp."""
    miss_offset: float = 0.015
    """Distance (m) a deliberate miss aims off the cube's centre, in a random direction (+-20%)."""


@dataclass
class PretrainConfig:
    steps: int = 20_000
    """Gradient steps of behaviour cloning."""
    batch_size: int = 64
    """Chunks per gradient step."""
    lr: float = 3.0e-4
    """Peak AdamW learning rate (linear warm-up, then cosine decay)."""
    warmup_steps: int = 500
    """Steps of linear learning-rate warm-up."""
    weight_decay: float = 1.0e-4
    """AdamW weight decay."""
    val_fraction: float = 0.1
    """Share of episodes held out for the validation loss (the last ones); 0 trains on every
    episode (the validation loss is then taken on training episodes)."""
    state_noise: float = 0.0
    """Gaussian noise added to each training state, in standard deviations of that feature in
    the training data (augmentation; validation and inference see clean states)."""
    hold_after_success: bool = False
    """Train the chunk rows past the end of an episode that ended in success as holding its last
    action (the sim ends an episode at success; masked, the policy never learns to stay there)."""
    val_every: int = 500
    """Steps between validation losses."""
    val_batches: int = 8
    """Batches in one validation pass (fixed samples and noise, so passes compare)."""
    checkpoint_every: int = 1000
    """Steps between checkpoints (run_dir/policy, run_dir/policy_best, resume state)."""
    ema: float = 0.0
    """Decay of a running average of the weights, per step (0.999: about the last 1000 steps);
    the checkpoints and the validation loss are the average's. 0: the last iterate. The
    learner's ``policy_ema`` does the same while fine-tuning."""
    resume: bool = True
    """Continue from run_dir's resume state when it exists."""
    threads: int = 0
    """torch intra-op threads on CPU; 0 keeps torch's default."""


@dataclass
class LaunchConfig:
    actors: int = 2
    """Actor processes `robotrl launch` starts beside the learner (actor ids actor-0, actor-1, ...)."""
    learner: bool = True
    """Start the learner too (false: the actors join a learner that runs elsewhere)."""
    max_restarts: int = 3
    """Restarts of one crashed role before launch stops everything and fails."""
    restart_backoff_s: float = 1.0
    """Wait before the first restart of a role; doubles with every further restart."""
    shutdown_timeout_s: float = 60.0
    """Time each stage of shutdown (actors, then the learner) gets before it is killed."""
    status_every_s: float = 2.0
    """Refresh period of the health table (and of run_dir/launch_status.json)."""
    actor_seed_stride: int = 100_000
    """Actor i starts at seed actor.seed + i * stride, so actors see different episodes."""
    actor_threads: int = 1
    """Torch/OpenMP threads per actor process (0: library default). One avoids oversubscribing
    the cores the learner needs; spinning OpenMP threads slow everything on a small CPU."""
    learner_threads: int = 0
    """Torch/OpenMP threads of the learner process (0: library default)."""


@dataclass
class ExperimentConfig:
    name: str = "demo"
    """Which experiment `robotrl experiment` runs: demo (the fine-tuning demo) or latency_sweep."""
    output_dir: str = "runs/demo"
    """Folder of every artefact; a second run reuses what is there (delete it to start over)."""
    demos: int = 20
    """Scripted expert demonstrations recorded for pretraining and the anchor buffer."""
    pretrain_steps: int = 4000
    """Behaviour-cloning steps of the pretrained baseline."""
    eval_episodes: int = 50
    """Fixed-seed evaluation episodes before and after fine-tuning (same seeds every time)."""
    eval_seed: int = 1_000_000
    """Seed of the first evaluation episode (far from the training seeds)."""
    online_episodes: int = 40
    """Online episodes per actor in each fine-tuning run: the budget, equal for rapi and bc."""
    update_groups: int = 200
    """Learner update groups in each fine-tuning run (also equal for rapi and bc)."""
    actors: int = 1
    """Actor processes in each fine-tuning run."""
    algorithms: list[str] = field(default_factory=lambda: ["rapi", "bc"])
    """Fine-tuning runs to compare (FINETUNE_RUNS): rapi; bc on the same buffers as rapi (its anchor
    keeps the fastest successes too); bc_demos, continued imitation of the anchor's demonstrations
    (and, with takeovers, of their segments: HG-DAgger's data), no online episodes."""
    repeats: int = 1
    """Fine-tuning runs per algorithm, each with its own seeds (learner seed + k, online episode
    seeds one actor stride further per actor): one run's success moves by ~10 points from run to
    run here, more than its interval says. The table pools every run's evaluation episodes (the
    Wilson interval counts episodes, so run-to-run spread shows in the per-run rates beside it)."""
    finetune_workers: int = 1
    """Fine-tuning runs at once, each its own `robotrl launch` (its output in its folder's
    output.log, progress lines in the demo's), then their evaluations as many at once: the learner
    and the actor of one run wait on each other in virtual time, so two runs share two cores with
    little loss, and an evaluation is one single-threaded process."""
    rerun_episodes: int = 2
    """Episodes of the fine-tuned policy recorded to demo.rrd (0: none)."""
    eval_noise_scale: float | None = None
    """Inference temperature of the fixed-seed evaluations and the rerun view (flow policy):
    0 scores each policy's deterministic chunk, as RL scores the mean action, while fine-tuning
    still explores at policy.noise_scale. None: policy.noise_scale everywhere."""
    checkpoint: str | None = None
    """latency_sweep: the policy checkpoint to sweep (default: the demo's pretrained policy)."""
    latencies: list[str] = field(
        default_factory=lambda: [
            "constant:0",
            "constant:0.05",
            "constant:0.1",
            "constant:0.2",
            "constant:0.4",
            "lognormal:0.15",
            "spike_mixture:0.15",
        ]
    )
    """latency_sweep: latency models as kind:median_s (kinds of actor.latency.kind)."""
    strategies: list[str] = field(default_factory=lambda: ["sync", "naive_async", "blend", "prefix"])
    """latency_sweep: execution strategies to compare."""
    sweep_episodes: int = 20
    """latency_sweep: fixed-seed episodes per (latency, strategy) cell."""
    sweep_workers: int = 0
    """latency_sweep: cells evaluated at once, each its own process (0: cores / inference threads)."""


@dataclass
class ReplayConfig:
    mode: str = "open_loop"
    """open_loop (recorded actions on the sim, states compared), resim (the policy at the recorded
    seeds under actor.latency, outcomes compared), to_learner (episodes into a learner's anchor
    buffer), view (a rerun recording of the episodes)."""
    episodes: list[int] = field(default_factory=list)
    """Episode indices of the dataset to replay; empty for all."""
    seed: int = 0
    """Reset seed of the dataset's episode 0; episode i used seed + i (as `robotrl record` does).
    Actor recordings (actor.record_dataset) store each episode's seed, which wins."""
    tolerance: float = 1e-4
    """open_loop: largest state difference (joint units) still counted as reproduced."""
    output: str | None = None
    """view: the .rrd file to write (default run_dir/replay.rrd)."""


@dataclass
class ProfileConfig:
    samples: int = 200
    """Inferences timed for the profile (after the warm-up)."""
    warmup: int = 10
    """Inferences run first and not timed (lazy initialisation, caches, CUDA kernels)."""
    delay: int = 4
    """Committed prefix length given to each inference (clipped to policy.max_delay)."""
    output: str = "runs/latency_profile.json"
    """Profile file to write; replay it with actor.latency.kind=empirical actor.latency.profile_path=..."""


@dataclass
class SafetyConfig:
    joint_low: list[float] = field(default_factory=list)
    """Lowest command per joint (action units, the robot's action order); empty: the SO-101's ranges."""
    joint_high: list[float] = field(default_factory=list)
    """Highest command per joint; empty: the SO-101's ranges."""
    max_step: float = 4.0
    """Largest change of a joint's command per tick (degrees; gripper units); 0 turns it off."""
    max_velocity: float = 240.0
    """Measured joint speed (units/s) above which the arm is held where it is; 0 turns it off."""
    workspace_low: list[float] = field(default_factory=list)
    """Lower corner (x, y, z metres, base frame) of the box the gripper stays in; empty: no box."""
    workspace_high: list[float] = field(default_factory=list)
    """Upper corner of the gripper's box."""
    watchdog_s: float = 0.25
    """Hold the arm when no command was sent for this long (a stuck or crashed control loop)."""
    disable_torque_on_stop: bool = False
    """On an emergency stop or an actor exit, also switch torque off (the arm goes limp: support it)."""
    max_read_failures: int = 10
    """Failed bus reads in a row before the actor stops (each one is counted and survived)."""


@dataclass
class HardwareConfig:
    robot_type: str | None = None
    """lerobot robot type (so101_follower, so100_follower, koch_follower, ...); null drives the sim."""
    robot_port: str = "/dev/ttyACM0"
    """Serial port of the follower arm (find it with `lerobot-find-port`)."""
    robot_id: str = "robotrl_follower"
    """lerobot id of the arm: names its calibration file."""
    calibration_dir: str | None = None
    """Folder of lerobot calibration files; null uses lerobot's default (~/.cache/huggingface/lerobot)."""
    cameras: dict[str, Any] = field(default_factory=dict)
    """Camera name -> lerobot camera config fields, e.g. front: {type: opencv, index_or_path: 0,
    width: 640, height: 480, fps: 30}. Names become observation.images.<name>."""
    robot_options: dict[str, Any] = field(default_factory=dict)
    """Further fields of lerobot's robot config (e.g. max_relative_target, use_degrees)."""
    teleop_type: str | None = None
    """lerobot teleoperator for interventions (so101_leader, gamepad, keyboard); null: none."""
    teleop_port: str = "/dev/ttyACM1"
    """Serial port of a leader arm."""
    teleop_id: str = "robotrl_leader"
    """lerobot id of the teleoperator (its calibration file)."""
    teleop_options: dict[str, Any] = field(default_factory=dict)
    """Further fields of lerobot's teleoperator config."""
    keys: bool = True
    """Read single keys in the actor's terminal: space e-stop, s success, f failure, i take over,
    n next episode."""
    reset_wait: bool = True
    """With keys: before each episode after the first, hold the arm until n (the scene is reset by hand)."""
    estop_event: str | None = None
    """A teleoperator event (lerobot TeleopEvents value, e.g. terminate_episode) that e-stops the arm."""
    success_reward: float = 1.0
    """Reward of a success (key, teleoperator button or detector)."""
    instruction: str = ""
    """The task instruction given to the policy (the sim's come from its task)."""
    success_detector: str | None = None
    """'module:function' called with every Observation; True ends the episode as a success.
    Null: success comes from the human (key s or a teleoperator button)."""
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    """Limits every command passes."""
    check_seconds: float = 0.0
    """`robotrl check-arm`: how long to read the limp arm (0: until Ctrl-C)."""


@dataclass
class RobotRLConfig:
    env: EnvConfig = field(default_factory=EnvConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    transport: TransportConfig = field(default_factory=TransportConfig)
    record: RecordConfig = field(default_factory=RecordConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    launch: LaunchConfig = field(default_factory=LaunchConfig)
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    dataset: str | None = None
    """Local LeRobotDataset directory of demonstrations (`robotrl pretrain dataset=...`)."""
    run_dir: str = "runs/default"
    """Where a role writes logs, checkpoints and results."""
    seed: int = 0
    """Global seed (torch, numpy) of this process."""


def _positive(name: str, value: float) -> Iterator[tuple[str, str]]:
    if value <= 0:
        yield name, f"must be > 0, got {value}"


def _endpoint(name: str, value: str) -> Iterator[tuple[str, str]]:
    if not value.startswith(("tcp://", "ipc://", "inproc://")):
        yield name, f"must be a ZeroMQ endpoint (tcp://host:port, ipc://path), got {value!r}"


def _unit_interval(name: str, value: float, *, open_ends: bool = False) -> Iterator[tuple[str, str]]:
    ok = 0 < value < 1 if open_ends else 0 <= value <= 1
    if not ok:
        bounds = "(0, 1)" if open_ends else "[0, 1]"
        yield name, f"must be in {bounds}, got {value}"


def problems(cfg: RobotRLConfig) -> list[tuple[str, str]]:
    """Every (dotted field, message) that is wrong with ``cfg``; empty when it is valid."""
    out: list[tuple[str, str]] = []
    e, p, a, lrn, t = cfg.env, cfg.policy, cfg.actor, cfg.learner, cfg.transport
    out += _positive("env.control_hz", e.control_hz)
    out += _positive("env.max_episode_ticks", e.max_episode_ticks)
    if not 16 <= e.image_size <= 1024:
        out.append(("env.image_size", f"must be in [16, 1024], got {e.image_size}"))
    if len(set(e.cameras)) != len(e.cameras):
        out.append(("env.cameras", f"lists a camera twice: {e.cameras}"))
    out += _takeover_problems(cfg)
    out += _positive("policy.horizon", p.horizon)
    if not 0 <= p.max_delay < p.horizon:
        out.append(("policy.max_delay", f"must be in [0, horizon={p.horizon}), got {p.max_delay}"))
    out += _positive("policy.flow_steps", p.flow_steps)
    if not 0 <= p.noise_scale <= 2:
        out.append(("policy.noise_scale", f"must be in [0, 2] (1: sample as trained), got {p.noise_scale}"))
    elif p.noise_scale != 1 and p.kind is not PolicyKind.flow:
        out.append(("policy.noise_scale", "applies to the built-in flow policy (policy.kind=flow) only"))
    if p.kind is PolicyKind.lerobot and not p.path:
        out.append(("policy.path", "a lerobot policy needs a local directory (no hub downloads)"))
    for name, dev in (("policy.device", p.device), ("learner.device", lrn.device)):
        if dev not in ("auto", "cpu", "cuda") and not dev.startswith("cuda:"):
            out.append((name, f"must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {dev!r}"))
    lat = a.latency
    out += _positive("actor.latency.median_s", lat.median_s) if lat.kind is not LatencyKind.constant else []
    if lat.kind is LatencyKind.constant and lat.median_s < 0:
        out.append(("actor.latency.median_s", f"must be >= 0, got {lat.median_s}"))
    if lat.sigma < 0:
        out.append(("actor.latency.sigma", f"must be >= 0, got {lat.sigma}"))
    out += _unit_interval("actor.latency.spike_prob", lat.spike_prob)
    if lat.kind is LatencyKind.empirical and not lat.profile_path:
        out.append(("actor.latency.profile_path", "the empirical latency model needs a profile file"))
    out += _positive("actor.delay_window", a.delay_window)
    out += _unit_interval("actor.delay_quantile", a.delay_quantile, open_ends=True)
    if a.margin_ticks < 0:
        out.append(("actor.margin_ticks", f"must be >= 0, got {a.margin_ticks}"))
    if a.execution_horizon < 0:
        out.append(("actor.execution_horizon", f"must be >= 0 (0: off), got {a.execution_horizon}"))
    out += _unit_interval("actor.blend_decay", a.blend_decay)
    if a.episodes < 0:
        out.append(("actor.episodes", f"must be >= 0, got {a.episodes}"))
    out += _positive("actor.max_inference_errors", a.max_inference_errors)
    if a.versions_per_episode < 0:
        out.append(("actor.versions_per_episode", f"must be >= 0, got {a.versions_per_episode}"))
    out += _positive("actor.weights_wait_s", a.weights_wait_s)
    if not a.actor_id:
        out.append(("actor.actor_id", "must not be empty"))
    if a.record_dataset is not None and not a.record_dataset.strip():
        out.append(("actor.record_dataset", "must be a folder path or null, got an empty string"))
    elif a.record_dataset and Path(a.record_dataset).exists() and not a.record_overwrite:
        out.append(
            (
                "actor.record_dataset",
                f"{a.record_dataset} exists; pick a new folder or set actor.record_overwrite=true",
            )
        )
    out += _positive("learner.batch_size", lrn.batch_size)
    out += _unit_interval("learner.anchor_fraction", lrn.anchor_fraction)
    if not 0 < lrn.gamma <= 1:
        out.append(("learner.gamma", f"must be in (0, 1], got {lrn.gamma}"))
    out += _unit_interval("learner.expectile", lrn.expectile, open_ends=True)
    out += _positive("learner.beta", lrn.beta)
    out += _positive("learner.adv_clip", lrn.adv_clip)
    if not 0 <= lrn.weight_ess < 1:
        out.append(("learner.weight_ess", f"must be in [0, 1) (0: the fixed beta), got {lrn.weight_ess}"))
    if lrn.intervention_penalty < 0:
        out.append(("learner.intervention_penalty", f"must be >= 0, got {lrn.intervention_penalty}"))
    out += _positive("learner.critic_updates_per_group", lrn.critic_updates_per_group)
    if lrn.actor_updates_per_group < 0:
        out.append(("learner.actor_updates_per_group", f"must be >= 0, got {lrn.actor_updates_per_group}"))
    if lrn.critic_warmup_updates < 0:
        out.append(("learner.critic_warmup_updates", f"must be >= 0, got {lrn.critic_warmup_updates}"))
    out += _positive("learner.lr", lrn.lr)
    if lrn.policy_lr is not None:
        out += _positive("learner.policy_lr", lrn.policy_lr)
    if not 0 <= lrn.policy_lr_end <= 1:
        out.append(("learner.policy_lr_end", f"must be in [0, 1] (1: constant), got {lrn.policy_lr_end}"))
    if not 0 <= lrn.policy_ema < 1:
        out.append(("learner.policy_ema", f"must be in [0, 1), got {lrn.policy_ema}"))
    out += _positive("learner.online_capacity", lrn.online_capacity)
    out += _positive("learner.anchor_capacity", lrn.anchor_capacity)
    if lrn.max_policy_lag is not None and lrn.max_policy_lag < 0:
        out.append(("learner.max_policy_lag", f"must be >= 0 or null, got {lrn.max_policy_lag}"))
    out += _positive("learner.checkpoint_every_groups", lrn.checkpoint_every_groups)
    out += _positive("learner.journal_max_mb", lrn.journal_max_mb)
    if lrn.max_samples_per_insert is not None and lrn.max_samples_per_insert <= 0:
        out.append(
            ("learner.max_samples_per_insert", f"must be > 0 or null, got {lrn.max_samples_per_insert}")
        )
    if lrn.prefetch_batches is not None and lrn.prefetch_batches < 0:
        out.append(("learner.prefetch_batches", f"must be >= 0 or null, got {lrn.prefetch_batches}"))
    if lrn.torch_threads < 0:
        out.append(("learner.torch_threads", f"must be >= 0 (0: torch's default), got {lrn.torch_threads}"))
    if lrn.fastest_successes < 0:
        out.append(("learner.fastest_successes", f"must be >= 0, got {lrn.fastest_successes}"))
    out += _positive("learner.critic_hidden", lrn.critic_hidden)
    out += _unit_interval("learner.target_tau", lrn.target_tau, open_ends=False)
    if lrn.target_tau == 0:
        out.append(("learner.target_tau", "must be > 0 (the targets would never move)"))
    out += _positive("learner.grad_clip", lrn.grad_clip)
    if lrn.learning_starts < 0:
        out.append(("learner.learning_starts", f"must be >= 0, got {lrn.learning_starts}"))
    if lrn.max_groups < 0:
        out.append(("learner.max_groups", f"must be >= 0 (0: until stopped), got {lrn.max_groups}"))
    out += _positive("learner.log_every_groups", lrn.log_every_groups)
    if lrn.online_capacity < 4 * p.horizon:
        out.append(
            ("learner.online_capacity", f"must be at least 4 * policy.horizon, got {lrn.online_capacity}")
        )
    if lrn.anchor_capacity < 4 * p.horizon:
        out.append(
            ("learner.anchor_capacity", f"must be at least 4 * policy.horizon, got {lrn.anchor_capacity}")
        )
    if lrn.demos_path is not None and not lrn.demos_path:
        out.append(("learner.demos_path", "must be a local dataset folder or null"))
    out += _endpoint("transport.transitions_endpoint", t.transitions_endpoint)
    out += _endpoint("transport.weights_endpoint", t.weights_endpoint)
    if t.transitions_endpoint == t.weights_endpoint:
        out.append(("transport.weights_endpoint", "must differ from transport.transitions_endpoint"))
    out += _record_problems(cfg)
    out += _positive("transport.batch_transitions", t.batch_transitions)
    out += _positive("transport.heartbeat_s", t.heartbeat_s)
    if t.peer_timeout_s <= t.heartbeat_s:
        out.append(
            ("transport.peer_timeout_s", f"must exceed heartbeat_s={t.heartbeat_s}, got {t.peer_timeout_s}")
        )
    out += _positive("transport.max_inflight_batches", t.max_inflight_batches)
    if t.spool_max_mb < 0:
        out.append(("transport.spool_max_mb", f"must be >= 0, got {t.spool_max_mb}"))
    out += _positive("transport.send_window", t.send_window)
    out += _positive("transport.weights_piece_mb", t.weights_piece_mb)
    if t.curve and not t.keys_dir:
        out.append(("transport.keys_dir", "curve is on, so a keys directory is needed"))
    if t.weights_subset not in ("trainable", "full"):
        out.append(("transport.weights_subset", f"must be 'trainable' or 'full', got {t.weights_subset!r}"))
    out += _pretrain_problems(cfg.pretrain)
    out += _launch_problems(cfg.launch)
    out += _experiment_problems(cfg.experiment)
    eval_noise = cfg.experiment.eval_noise_scale
    if eval_noise is not None:
        if not 0 <= eval_noise <= 2:
            out.append(
                (
                    "experiment.eval_noise_scale",
                    f"must be in [0, 2] (0: deterministic chunks) or null, got {eval_noise}",
                )
            )
        elif cfg.policy.kind is not PolicyKind.flow:
            out.append(
                ("experiment.eval_noise_scale", "applies to the built-in flow policy (policy.kind=flow) only")
            )
    out += _replay_problems(cfg.replay)
    out += _hardware_problems(cfg.hardware)
    out += _positive("profile.samples", cfg.profile.samples)
    if cfg.profile.warmup < 0:
        out.append(("profile.warmup", f"must be >= 0, got {cfg.profile.warmup}"))
    if cfg.profile.delay < 0:
        out.append(("profile.delay", f"must be >= 0, got {cfg.profile.delay}"))
    if not cfg.profile.output.strip():
        out.append(("profile.output", "must name a file"))
    if cfg.dataset is not None and not cfg.dataset.strip():
        out.append(("dataset", "must be a local LeRobotDataset directory or null, got an empty string"))
    return out


def _hardware_problems(hw: HardwareConfig) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    s = hw.safety
    if len(s.joint_low) != len(s.joint_high):
        out.append(("hardware.safety.joint_high", "needs as many entries as joint_low"))
    elif any(lo > hi for lo, hi in zip(s.joint_low, s.joint_high, strict=True)):
        out.append(("hardware.safety.joint_low", "exceeds joint_high for some joint"))
    for name in ("max_step", "max_velocity"):
        if getattr(s, name) < 0:
            out.append((f"hardware.safety.{name}", f"must be >= 0 (0: off), got {getattr(s, name)}"))
    box = (s.workspace_low, s.workspace_high)
    if any(box) and not all(len(c) == 3 for c in box):
        out.append(("hardware.safety.workspace_low", "a workspace box needs two corners of 3 numbers"))
    elif all(box) and any(lo >= hi for lo, hi in zip(*box, strict=True)):
        out.append(("hardware.safety.workspace_low", "must be below workspace_high on every axis"))
    out += _positive("hardware.safety.watchdog_s", s.watchdog_s)
    out += _positive("hardware.safety.max_read_failures", s.max_read_failures)
    if hw.success_detector is not None and hw.success_detector.count(":") != 1:
        out.append(("hardware.success_detector", f"must be 'module:function', got {hw.success_detector!r}"))
    if hw.check_seconds < 0:
        out.append(("hardware.check_seconds", f"must be >= 0 (0: until Ctrl-C), got {hw.check_seconds}"))
    if hw.robot_type is not None and not hw.robot_type.strip():
        out.append(("hardware.robot_type", "must be a lerobot robot type or null"))
    for cam, fields_ in hw.cameras.items():
        if not isinstance(fields_, dict) or "type" not in fields_:
            out.append((f"hardware.cameras.{cam}", "needs a lerobot camera config with a type (e.g. opencv)"))
    return out


def _pretrain_problems(pt: PretrainConfig) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for name in ("steps", "batch_size", "val_every", "val_batches", "checkpoint_every"):
        out += _positive(f"pretrain.{name}", getattr(pt, name))
    out += _positive("pretrain.lr", pt.lr)
    if pt.warmup_steps < 0:
        out.append(("pretrain.warmup_steps", f"must be >= 0, got {pt.warmup_steps}"))
    if pt.weight_decay < 0:
        out.append(("pretrain.weight_decay", f"must be >= 0, got {pt.weight_decay}"))
    if not 0 <= pt.val_fraction < 1:
        out.append(("pretrain.val_fraction", f"must be in [0, 1), got {pt.val_fraction}"))
    if pt.threads < 0:
        out.append(("pretrain.threads", f"must be >= 0, got {pt.threads}"))
    if not 0 <= pt.state_noise <= 1:
        out.append(("pretrain.state_noise", f"must be in [0, 1] (standard deviations), got {pt.state_noise}"))
    if not 0 <= pt.ema < 1:
        out.append(("pretrain.ema", f"must be in [0, 1) (0: no average), got {pt.ema}"))
    return out


def _launch_problems(la: LaunchConfig) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if la.actors < 0:
        out.append(("launch.actors", f"must be >= 0, got {la.actors}"))
    if la.actors == 0 and not la.learner:
        out.append(("launch.actors", "with launch.learner=false there must be at least one actor"))
    if la.max_restarts < 0:
        out.append(("launch.max_restarts", f"must be >= 0, got {la.max_restarts}"))
    if la.restart_backoff_s < 0:
        out.append(("launch.restart_backoff_s", f"must be >= 0, got {la.restart_backoff_s}"))
    out += _positive("launch.shutdown_timeout_s", la.shutdown_timeout_s)
    out += _positive("launch.status_every_s", la.status_every_s)
    out += _positive("launch.actor_seed_stride", la.actor_seed_stride)
    for name in ("actor_threads", "learner_threads"):
        if getattr(la, name) < 0:
            out.append((f"launch.{name}", f"must be >= 0 (0: library default), got {getattr(la, name)}"))
    return out


def parse_latency(spec: str) -> tuple[LatencyKind, float]:
    """'kind:median_s' (e.g. 'lognormal:0.15') -> (kind, median_s); ValueError names what is wrong."""
    kind, sep, median = spec.partition(":")
    if not sep:
        raise ValueError(f"{spec!r} is not kind:median_s (e.g. constant:0.1)")
    try:
        parsed = LatencyKind(kind)
    except ValueError:
        raise ValueError(f"{spec!r}: unknown latency kind {kind!r}") from None
    if parsed is LatencyKind.empirical:
        raise ValueError(f"{spec!r}: the empirical model needs a profile file, not a median")
    value = float(median)
    if value < 0 or (value == 0 and parsed is not LatencyKind.constant):
        raise ValueError(f"{spec!r}: the median must be > 0 (>= 0 for constant)")
    return parsed, value


def _experiment_problems(ex: ExperimentConfig) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if ex.name not in ("demo", "latency_sweep"):
        out.append(("experiment.name", f"must be 'demo' or 'latency_sweep', got {ex.name!r}"))
    for name in (
        "demos",
        "pretrain_steps",
        "eval_episodes",
        "online_episodes",
        "update_groups",
        "actors",
        "repeats",
        "finetune_workers",
    ):
        out += _positive(f"experiment.{name}", getattr(ex, name))
    out += _positive("experiment.sweep_episodes", ex.sweep_episodes)
    if ex.rerun_episodes < 0:
        out.append(("experiment.rerun_episodes", f"must be >= 0, got {ex.rerun_episodes}"))
    if ex.sweep_workers < 0:
        out.append(("experiment.sweep_workers", f"must be >= 0 (0: one per core), got {ex.sweep_workers}"))
    for name in ("latencies", "strategies"):
        listed = getattr(ex, name)
        if len(set(listed)) != len(listed):
            out.append((f"experiment.{name}", f"lists a value twice (each is one column of cells): {listed}"))
    bad = [a for a in ex.algorithms if a not in FINETUNE_RUNS]
    if bad or not ex.algorithms or len(set(ex.algorithms)) != len(ex.algorithms):
        out.append(
            (
                "experiment.algorithms",
                f"must list some of {list(FINETUNE_RUNS)} once each, got {ex.algorithms}",
            )
        )
    bad = [s for s in ex.strategies if s not in {k.value for k in Strategy}]
    if bad or not ex.strategies:
        out.append(("experiment.strategies", f"must list strategies of {[k.value for k in Strategy]}"))
    for spec in ex.latencies:
        try:
            parse_latency(spec)
        except ValueError as exc:
            out.append(("experiment.latencies", str(exc)))
    if not ex.latencies:
        out.append(("experiment.latencies", "must not be empty"))
    return out


def demo_online_seeds(cfg: RobotRLConfig, run: int, actor: int) -> int:
    """The first online episode seed of ``actor`` in the demo's fine-tuning run ``run`` (from 0):
    each run's actors start one ``launch.actor_seed_stride`` beyond the previous run's last actor."""
    return cfg.actor.seed + (run * cfg.experiment.actors + actor) * cfg.launch.actor_seed_stride


def demo_seed_problems(cfg: RobotRLConfig) -> list[tuple[str, str]]:
    """The demo must never fine-tune on its evaluation seeds (that would score memorised episodes).
    Checked by the demo itself, not :func:`problems`: its steps' own processes carry
    ``actor.seed`` = the evaluation seed beside the experiment group's defaults."""
    ex = cfg.experiment
    if ex.name != "demo" or min(ex.repeats, ex.actors, ex.online_episodes, ex.eval_episodes) < 1:
        return []
    first = demo_online_seeds(cfg, 0, 0)
    last = demo_online_seeds(cfg, ex.repeats - 1, ex.actors - 1) + ex.online_episodes - 1
    if first <= ex.eval_seed + ex.eval_episodes - 1 and ex.eval_seed <= last:
        return [
            (
                "experiment.eval_seed",
                f"the evaluation seeds {ex.eval_seed}-{ex.eval_seed + ex.eval_episodes - 1} overlap "
                f"the fine-tuning runs' online seeds {first}-{last}: move experiment.eval_seed past them",
            )
        ]
    return []


REPLAY_MODES = ("open_loop", "resim", "to_learner", "view")


def _replay_problems(rp: ReplayConfig) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if rp.mode not in REPLAY_MODES:
        out.append(("replay.mode", f"must be one of {list(REPLAY_MODES)}, got {rp.mode!r}"))
    if any(e < 0 for e in rp.episodes):
        out.append(("replay.episodes", f"must be episode indices >= 0, got {rp.episodes}"))
    out += _positive("replay.tolerance", rp.tolerance)
    return out


def _takeover_problems(cfg: RobotRLConfig) -> list[tuple[str, str]]:
    e = cfg.env
    if e.expert_takeover_ticks < 0:
        return [("env.expert_takeover_ticks", f"must be >= 0 (0: never), got {e.expert_takeover_ticks}")]
    wait = e.expert_takeover_miss_wait_ticks
    if wait < 0 or (wait and not e.expert_takeover_on_miss):
        return [
            (
                "env.expert_takeover_miss_wait_ticks",
                f"must be >= 0 and needs expert_takeover_on_miss, got {wait}",
            )
        ]
    grasps = e.expert_takeover_on_miss or e.expert_takeover_before_miss
    if e.expert_takeover_max_corrections < 1:
        return [
            (
                "env.expert_takeover_max_corrections",
                f"must be >= 1, got {e.expert_takeover_max_corrections}",
            )
        ]
    if e.expert_takeover_reopen_only and not grasps:
        return [
            (
                "env.expert_takeover_reopen_only",
                "needs expert_takeover_on_miss or expert_takeover_before_miss",
            )
        ]
    if not e.scripted_takeover:
        return []
    switched_on = (
        ("on_miss", e.expert_takeover_on_miss),
        ("before_miss", e.expert_takeover_before_miss),
        ("ticks", bool(e.expert_takeover_ticks)),
    )
    field_name = next(f"env.expert_takeover_{name}" for name, on in switched_on if on)
    if cfg.hardware.robot_type is not None:
        return [(field_name, "a scripted takeover exists only in the sim (on a real arm, a person)")]
    pick_place = e.id.endswith("PickPlace-v0")
    if grasps and not pick_place:
        return [(field_name, f"a missed grasp exists only in pick-and-place, not {e.id}")]
    if pick_place and not e.privileged_state:
        return [(field_name, "the pick-and-place expert needs the cube pose: set env.privileged_state=true")]
    return []


def _record_problems(cfg: RobotRLConfig) -> list[tuple[str, str]]:
    r = cfg.record
    out = list(_positive("record.episodes", r.episodes))
    if not r.output_dir:
        out.append(("record.output_dir", "must not be empty"))
    if r.repo_id.count("/") != 1 or not all(r.repo_id.split("/")):
        out.append(("record.repo_id", f"must look like 'owner/name', got {r.repo_id!r}"))
    if not 0 <= r.expert_noise <= 1:
        out.append(("record.expert_noise", f"must be in [0, 1], got {r.expert_noise}"))
    if not 0 <= r.dart_noise <= 1:
        out.append(("record.dart_noise", f"must be in [0, 1], got {r.dart_noise}"))
    if not 0 <= r.miss_rate <= 1:
        out.append(("record.miss_rate", f"must be in [0, 1], got {r.miss_rate}"))
    elif r.miss_rate > 0 and not cfg.env.id.endswith("PickPlace-v0"):
        out.append(("record.miss_rate", f"deliberate misses exist only for pick-and-place, not {cfg.env.id}"))
    if not 0 < r.miss_offset <= 0.1:
        out.append(("record.miss_offset", f"must be in (0, 0.1] m, got {r.miss_offset}"))
    if cfg.policy.kind is PolicyKind.expert and not cfg.env.id.startswith("robotrl/"):
        out.append(("env.id", f"the scripted expert exists only for robotrl/ sim tasks, got {cfg.env.id!r}"))
    return out


def field_docs(cls: type[Any]) -> dict[str, str]:
    """Field name -> its docstring, read from the source (used by `robotrl config --help`)."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, nxt in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = nxt.value.value.strip()
    return docs


def config_groups() -> dict[str, type[Any]]:
    """Group name -> dataclass, from :class:`RobotRLConfig`'s fields."""
    root = RobotRLConfig()
    return {f.name: type(getattr(root, f.name)) for f in fields(root) if is_dataclass(getattr(root, f.name))}
