"""The ``actor`` group: execution strategy, delay estimate, episodes and recording of an actor."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from robotrl.config.bounds import bounds
from robotrl.config.latency import LatencyConfig


class Strategy(Enum):
    """How the actor merges a new chunk with the one it is executing."""

    sync = "sync"  # stop and wait for every chunk (the baseline that pauses the robot)
    naive_async = "naive_async"  # switch to the new chunk at its first future tick
    blend = "blend"  # weighted merge of old and new on the overlap
    prefix = "prefix"  # real-time chunking: the policy continues the committed prefix


@dataclass
class ActorConfig:
    actor_id: str = field(default="actor-0", metadata=bounds(nonblank=True))
    """Name of this actor in the transition stream; unique per learner."""
    strategy: Strategy = Strategy.prefix
    """Execution strategy for overlapping chunks."""
    virtual_time: bool = True
    """Sim only: no sleeping; the latency model decides how many ticks an inference takes."""
    latency: LatencyConfig = field(default_factory=LatencyConfig)
    """Latency model for virtual time."""
    delay_window: int = field(default=50, metadata=bounds(gt=0))
    """Inferences remembered by the delay estimate (old spikes are forgotten)."""
    delay_quantile: float = field(default=0.9, metadata=bounds(gt=0, lt=1))
    """Quantile of recent delays used as the expected delay."""
    margin_ticks: int = field(default=2, metadata=bounds(ge=0))
    """Start the next inference when actions left <= expected delay + margin, while the recent
    delays vary (a steady delay needs none, so at 0 ms every strategy does what sync does). Two
    ticks cover the odd inference a little slower than the delay quantile (measured: 0 starved
    ticks in 60 s of `robotrl bench actor`, against 1-3 with one)."""
    refresh_on_new_weights: bool = True
    """Async strategies: ask for a chunk as soon as newer weights are loaded, instead of running
    out the current plan first (new weights act within one inference of arriving)."""
    execution_horizon: int = field(default=0, metadata=bounds(ge=0, note="0: off"))
    """Async strategies: ask for the next chunk once this many ticks have passed since the last
    request, however many planned actions are left (RTC's execution horizon s): the robot then
    acts on observations at most s + delay ticks old instead of up to a chunk old, at more
    inferences per second. 0: ask only when the plan runs low (or newer weights arrive)."""
    max_in_flight: int = field(default=0, metadata=bounds(ge=0, note="0: auto"))
    """prefix: inferences in flight at once (pipelined inference). When one chunk cannot cover the
    delay (past half its length), the next request is made while the last is computed and
    continues its chunk, so the arm never waits up to a delay of one horizon. 0: as many as the
    delay needs in virtual time, whose latency model draws each request's delay as a server
    with spare capacity would; 1 with a local worker process (wall clock), which computes one at
    a time, so a second request would only wait behind the first."""
    blend_decay: float = field(default=0.5, metadata=bounds(ge=0, le=1))
    """blend: weight of the old chunk decays by this factor per overlapping tick."""
    episodes: int = field(default=10, metadata=bounds(ge=0))
    """Episodes to run (eval) or 0 to run until stopped (online)."""
    versions_per_episode: float = field(default=0.0, metadata=bounds(ge=0))
    """Virtual time, online: episode k starts once the learner has published policy version
    floor(k * this). Virtual time runs the robot as fast as the CPU allows, so an unpaced actor
    can finish every episode on its first weights; a real arm gets a fixed share of learner
    updates per episode, and this keeps that share in the sim, whatever the load. 0: no pace."""
    weights_wait_s: float = field(default=120.0, metadata=bounds(gt=0))
    """versions_per_episode: longest wait for a version once the learner has published one; after
    one timeout (a learner that has stopped publishing) the actor logs it and runs on unpaced. The
    learner's first version is waited for while the learner is up or not yet heard from, logged
    every this many seconds."""
    seed: int = 0
    """Seed of the first episode; episode i uses seed + i."""
    realtime_priority: int = field(default=0, metadata=bounds(ge=0, le=99, note="0: normal scheduling"))
    """Wall clock, Linux: run the control loop's thread at this SCHED_FIFO priority (50 is what
    ros2_control uses) and the inference worker's at one below, so a busy learner on the same
    cores can neither delay a tick nor stretch an inference (measured in `robotrl bench actor`).
    Weights still load at normal priority, and so do the actor's other threads (they share the
    GIL with the loop) and torch's extra intra-op threads. Needs root, CAP_SYS_NICE or an
    `rtprio` limit (`ulimit -r`); refused at start with a clear error otherwise."""
    max_inference_errors: int = field(default=3, metadata=bounds(gt=0))
    """Consecutive inference errors before the actor stops cleanly."""
    rerun_path: str | None = None
    """Write a rerun recording (.rrd: cameras, joints, generated vs executed chunks, latency) here."""
    record_dataset: str | None = field(default=None, metadata=bounds(nonblank=True))
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
