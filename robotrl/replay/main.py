"""`robotrl replay dataset=DIR replay.mode=...`: what to do with recorded episodes.

- ``open_loop``: reset the sim with each episode's seed, apply the recorded actions, and
  compare every state with the recorded one (a recording is only trustworthy if it
  reproduces); exits 1 when an episode drifts beyond ``replay.tolerance``.
- ``resim``: run the policy of ``policy.path`` at the recorded episodes' seeds under the
  configured strategy and latency model, and compare outcomes with the recording.
- ``to_learner``: stream the episodes to a learner (``transport.transitions_endpoint``)
  as intervention segments, so they land in its anchor buffer.
- ``view``: a rerun recording of the episodes (cameras, joints, actions and, for actor
  recordings, policy version, chunk id and delay per tick).
"""

from __future__ import annotations

import copy
import dataclasses
import sys
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import track
from rich.table import Table

from robotrl.config.schema import RobotRLConfig
from robotrl.core import run_folder
from robotrl.data.lerobot_dataset import DatasetError, RecordedDataset
from robotrl.replay.episodes import Episode, read_episodes

console = Console(stderr=True)


def main(cfg: RobotRLConfig) -> int:
    if not cfg.dataset:
        print("robotrl replay: set dataset=DIR (a local LeRobotDataset)", file=sys.stderr)
        return 2
    try:
        ds = RecordedDataset(cfg.dataset)
        episodes = read_episodes(ds, list(cfg.replay.episodes))
        mode = cfg.replay.mode
        if mode == "open_loop":
            return open_loop(cfg, episodes)
        if mode == "resim":
            return resim(cfg, episodes)
        if mode == "to_learner":
            return to_learner(cfg, episodes)
        return view(cfg, ds, episodes)
    except DatasetError as exc:
        print(f"robotrl replay: {exc}", file=sys.stderr)
        return 2


def _sim_env(cfg: RobotRLConfig, episodes: list[Episode], cameras: bool) -> Any:
    from robotrl.sim import ENV_IDS, make_env

    if cfg.env.id not in ENV_IDS:
        raise DatasetError(f"env.id={cfg.env.id!r}: replay on the real arm needs the hardware adapter")
    env_cfg = copy.deepcopy(cfg.env)
    if not cameras:
        env_cfg.cameras = []  # states and actions only: rendering would just cost time
    env = make_env(env_cfg)
    have, want = env.spec.state_dim, episodes[0].state.shape[1]
    if have != want:
        env.close()
        raise DatasetError(
            f"the dataset's state has {want} values, env {cfg.env.id} gives {have} "
            "(check env.privileged_state and env=...)"
        )
    return env


def _write(cfg: RobotRLConfig, name: str, payload: dict[str, Any]) -> Path:
    return run_folder.write_json(Path(cfg.run_dir) / name, payload, indent=1)


# -- open loop ---------------------------------------------------------------------------


def replay_open_loop(env: Any, episode: Episode, seed: int) -> dict[str, Any]:
    """Recorded actions from the recorded seed; the per-tick state difference and the outcome."""
    obs = env.reset(seed=seed)
    errors = [float(np.max(np.abs(obs.state - episode.state[0])))]
    success = False
    for t in range(len(episode)):
        step = env.step(episode.action[t])
        success = success or bool(step.info.get("is_success"))
        if t + 1 < len(episode):
            errors.append(float(np.max(np.abs(step.observation.state - episode.state[t + 1]))))
        if (step.terminated or step.truncated) and t + 1 < len(episode):
            break
    return {
        "episode": episode.index,
        "seed": seed,
        "frames": len(episode),
        "compared": len(errors),
        "max_state_error": max(errors),
        "first_drift_tick": None,
        "recorded_success": episode.success,
        "replayed_success": success,
        "errors": errors,
    }


def open_loop(cfg: RobotRLConfig, episodes: list[Episode]) -> int:
    env = _sim_env(cfg, episodes, cameras=False)
    tol = cfg.replay.tolerance
    rows = []
    try:
        for ep in track(episodes, description="open-loop replay", console=console):
            row = replay_open_loop(env, ep, ep.reset_seed(cfg.replay.seed))
            over = [i for i, e in enumerate(row.pop("errors")) if e > tol]
            row["first_drift_tick"] = over[0] if over else None
            rows.append(row)
    finally:
        env.close()
    table = Table(title=f"open-loop replay of {cfg.dataset} (tolerance {tol:g})")
    for col in ("episode", "seed", "frames", "max state error", "drifts at tick", "success rec/replay"):
        table.add_column(col, justify="right")
    for r in rows:
        drift = "-" if r["first_drift_tick"] is None else str(r["first_drift_tick"])
        table.add_row(
            str(r["episode"]),
            str(r["seed"]),
            str(r["frames"]),
            f"{r['max_state_error']:.2e}",
            drift,
            f"{r['recorded_success']}/{r['replayed_success']}",
        )
    Console().print(table)
    reproduced = sum(r["first_drift_tick"] is None for r in rows)
    out = _write(
        cfg, run_folder.REPLAY_OPEN_LOOP, {"tolerance": tol, "reproduced": reproduced, "episodes": rows}
    )
    console.print(f"{reproduced}/{len(rows)} episodes reproduced within {tol:g}; details in {out}")
    return 0 if reproduced == len(rows) else 1


# -- re-simulation -------------------------------------------------------------------------


def resim(cfg: RobotRLConfig, episodes: list[Episode]) -> int:
    """The policy at the recorded seeds under the configured latency; outcomes side by side."""
    from robotrl.actor.compose import build_loop, make_backend
    from robotrl.sim.latency import build_latency_model

    if not cfg.policy.path:
        print("robotrl replay: resim needs policy.path=DIR (the policy to re-simulate)", file=sys.stderr)
        return 2
    run_cfg = copy.deepcopy(cfg)
    run_cfg.actor.virtual_time = True
    env = _sim_env(run_cfg, episodes, cameras=True)
    backend, horizon, prefix_cap = make_backend(run_cfg, env.spec, online=False)
    loop = build_loop(
        env,
        backend,
        run_cfg.actor,
        horizon,
        build_latency_model(run_cfg.actor.latency),
        max_prefix=prefix_cap,
    )
    rows = []
    try:
        for ep in track(episodes, description="re-simulating", console=console):
            result = loop.run_episode(ep.index, seed=ep.reset_seed(cfg.replay.seed))
            rows.append(
                {
                    "episode": ep.index,
                    "recorded_ticks": len(ep),
                    "recorded_success": ep.success,
                    "resim_ticks": result.ticks,
                    "resim_success": result.success,
                    "resim_jerk_rms": result.jerk_rms,
                    "resim_mean_delay": float(np.mean(result.delays)) if result.delays else None,
                    "starved_ticks": result.starved_ticks,
                }
            )
    finally:
        backend.close()
        env.close()
    lat = cfg.actor.latency
    table = Table(
        title=f"re-simulation: {cfg.actor.strategy.value}, {lat.kind.value} {lat.median_s * 1e3:.0f} ms"
    )
    for col in ("episode", "recorded", "re-simulated", "starved", "mean delay"):
        table.add_column(col, justify="right")
    for r in rows:
        delay = "-" if r["resim_mean_delay"] is None else f"{r['resim_mean_delay']:.1f}"
        table.add_row(
            str(r["episode"]),
            f"{'success' if r['recorded_success'] else 'fail'} in {r['recorded_ticks']}",
            f"{'success' if r['resim_success'] else 'fail'} in {r['resim_ticks']}",
            str(r["starved_ticks"]),
            delay,
        )
    Console().print(table)
    rec = sum(bool(r["recorded_success"]) for r in rows)
    sim = sum(bool(r["resim_success"]) for r in rows)
    out = _write(cfg, run_folder.REPLAY_RESIM, {"policy": cfg.policy.path, "episodes": rows})
    console.print(f"success: recorded {rec}/{len(rows)}, re-simulated {sim}/{len(rows)}; details in {out}")
    return 0


# -- to the learner ------------------------------------------------------------------------


def to_learner(cfg: RobotRLConfig, episodes: list[Episode]) -> int:
    """Episodes as intervention segments over the transition link: the learner anchors them."""
    from robotrl.learner.demos import load_demonstrations
    from robotrl.learner.main import _env_spec, replay_spec
    from robotrl.transport.transitions import TransitionSender

    assert cfg.dataset is not None
    spec = replay_spec(cfg, _env_spec(cfg), cfg.policy.horizon)
    wanted = {ep.index for ep in episodes}
    batches = load_demonstrations(cfg.dataset, spec, cfg.learner.success_reward)
    actor_id = "replay"
    sender = TransitionSender.from_config(cfg.transport, actor_id)
    sent = frames = 0
    try:
        for i, batch in enumerate(batches):
            if int(batch.episode_id[0]) not in wanted:
                continue
            n = len(batch.action)
            stream = dataclasses.replace(
                batch,
                actor_id=actor_id,
                intervention=np.ones(n, np.bool_),
                episode_id=np.full(n, i, np.int64),
            )
            while not sender.send(stream):
                sender.flush(timeout_s=1.0)  # the window is full: let acks come back
            sent, frames = sent + 1, frames + n
        delivered = sender.flush(timeout_s=max(30.0, cfg.transport.peer_timeout_s * 4), while_acked=True)
    finally:
        sender.close()
    stats = sender.stats()
    out = _write(
        cfg,
        run_folder.REPLAY_TO_LEARNER,
        {"episodes": sent, "frames": frames, "delivered": delivered, **stats},
    )
    console.print(
        f"sent {sent} episodes ({frames} frames) to {cfg.transport.transitions_endpoint} as intervention "
        f"segments; {'all acknowledged' if delivered else 'NOT all acknowledged (kept in the spool)'}; {out}"
    )
    return 0 if delivered else 1


# -- view ------------------------------------------------------------------------------------


def view(cfg: RobotRLConfig, ds: RecordedDataset, episodes: list[Episode]) -> int:
    import rerun as rr

    path = Path(cfg.replay.output or Path(cfg.run_dir) / run_folder.REPLAY_RECORDING)
    path.parent.mkdir(parents=True, exist_ok=True)
    rec = rr.RecordingStream("robotrl-replay")
    rec.save(str(path))
    cameras = ds.cameras
    for ep in track(episodes, description="writing the rerun view", console=console):
        for t, row in enumerate(ep.rows.tolist()):
            rec.set_time("tick", sequence=t)
            rec.set_time("episode", sequence=ep.index)
            for j, (s, a) in enumerate(zip(ep.state[t].tolist(), ep.action[t].tolist(), strict=False)):
                rec.log(f"joints/{j}/state", rr.Scalars(s))
                rec.log(f"joints/{j}/action", rr.Scalars(a))
            for key, values in ep.extras.items():
                rec.log(f"episode/{key}", rr.Scalars(float(np.asarray(values[t]).reshape(-1)[0])))
            for cam, img in ds.frame_images(row, cameras).items():
                rec.log(f"camera/{cam}", rr.Image(img))
    rec.flush()
    console.print(f"rerun view of {len(episodes)} episodes: {path}  (open with: rerun {path})")
    return 0
