"""`robotrl eval` and `robotrl actor`: the actor's roles.

`robotrl eval` runs episodes without a learner and writes their summary and one record
per episode; `robotrl actor` streams its transitions to the learner, takes its weights
from it (hot-swapped between inferences) and rewrites its progress after every episode.
The parts are made in :mod:`robotrl.actor.compose`, the episodes run in
:mod:`robotrl.actor.run`, and what they report is :mod:`robotrl.actor.report`'s.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from robotrl.actor.loop import EpisodeResult
from robotrl.actor.report import SentAudit, actor_progress, episode_rows, print_summary
from robotrl.actor.run import run_episodes
from robotrl.config.schema import RobotRLConfig
from robotrl.core import run_folder
from robotrl.core.malloc import return_freed_buffers
from robotrl.core.types import Transition

FENCED_EXIT = 5
"""`robotrl actor`'s exit status when a newer process with its actor id took over."""


def eval_role(cfg: RobotRLConfig) -> int:
    """`robotrl eval`: episodes without a learner; prints and writes the summary."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    finished: list[EpisodeResult] = []

    def keep(results: Sequence[EpisodeResult]) -> None:
        finished[:] = results

    summary = run_episodes(cfg, sink=None, title="eval", on_episode=keep)
    print_summary(summary)
    run_dir = Path(cfg.run_dir)
    out = run_folder.write_eval_summary(run_dir, summary)
    rows = run_folder.write_eval_episodes(run_dir, episode_rows(finished))
    print(f"summary written to {out}, one line per episode to {rows}", file=sys.stderr)
    return 1 if summary["failures"] else 0


def actor_role(cfg: RobotRLConfig) -> int:
    """`robotrl actor`: episodes whose transitions stream to the learner and whose weights
    come from it, hot-swapped between inferences."""
    from robotrl.core.batch import TransitionBatch
    from robotrl.transport.transitions import ActorFencedError, TransitionSender

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return_freed_buffers()  # an outage's backlog leaves the process once it drains
    run_dir, actor_id = Path(cfg.run_dir), cfg.actor.actor_id
    audit = SentAudit(run_dir, actor_id) if cfg.actor.audit_sent else None
    sender = TransitionSender.from_config(cfg.transport, actor_id, on_numbered=audit)
    refused = 0
    rows_sent = 0

    def to_learner(transitions: list[Transition]) -> None:
        nonlocal refused, rows_sent
        if sender.fenced:  # a newer process has this actor id: stop here (the arm holds)
            raise ActorFencedError(f"a newer process with actor id {actor_id} has taken over")
        if not sender.send(TransitionBatch.from_transitions(transitions)):
            refused += len(transitions)  # queue and spool full: counted, reported below
            return
        rows_sent += len(transitions)

    def report(results: Sequence[EpisodeResult]) -> None:
        progress = actor_progress(results, sender.backlog(), rows_sent, refused)
        run_folder.write_actor_progress(run_dir, actor_id, progress)

    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        summary = run_episodes(cfg, sink=to_learner, title=actor_id, online=True, on_episode=report)
        # A backlog (left by a learner outage) is delivered while the learner keeps acknowledging.
        delivered = sender.flush(timeout_s=cfg.transport.peer_timeout_s * 2, while_acked=True)
    except ActorFencedError as exc:
        print(
            f"robotrl actor: fenced: {exc}; its batches are in the spool. Run one process per actor id.",
            file=sys.stderr,
        )
        return FENCED_EXIT
    finally:
        sender.close()
    summary["transport"] = {**sender.stats(), "refused_transitions": refused, "flushed": delivered}
    print_summary(summary)
    out = run_folder.write_actor_summary(run_dir, actor_id, summary)
    print(f"summary written to {out}", file=sys.stderr)
    if not delivered:
        print(
            "robotrl actor: some transitions were not acknowledged by the learner (kept in the spool)",
            file=sys.stderr,
        )
    return 1 if summary["failures"] else 0
