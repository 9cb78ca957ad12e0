"""Which policy kinds each `robotrl` role can run: a role given another one fails at start
with a config error naming ``policy.kind``, not deep inside the policy factory."""

from __future__ import annotations

from robotrl.config.policy import PolicyKind
from robotrl.config.schema import Problems, RobotRLConfig

LEARNED = (PolicyKind.flow, PolicyKind.lerobot)
"""Policies with weights: what acts, learns and is timed."""

HINTS = {
    "record": "; a learned policy's episodes come from `robotrl eval` or `robotrl actor`",
}
"""What to do instead, where a role's refusal leaves a question."""


def runnable_kinds(role: str, cfg: RobotRLConfig) -> tuple[PolicyKind, ...] | None:
    """The policy kinds ``role`` can run with ``cfg``; None when it runs no policy at all."""
    match role:
        case "actor" | "eval" | "learner" | "launch" | "profile-latency":
            return LEARNED
        case "record":
            return (PolicyKind.expert,)
        case "pretrain":
            return LEARNED
        case "replay":  # only resim runs a policy; the other modes replay recorded actions
            return LEARNED if cfg.replay.mode == "resim" else None
        case (
            "experiment"
        ):  # the demo pretrains the built-in flow policy or experiment.vla; a sweep runs a checkpoint
            if cfg.experiment.name != "demo":
                return LEARNED
            return (PolicyKind.lerobot,) if cfg.experiment.vla else (PolicyKind.flow,)
        case _:
            return None


def role_problems(role: str, cfg: RobotRLConfig) -> Problems:
    """``policy.kind``'s problem when ``role`` cannot run that kind of policy; empty otherwise."""
    kinds = runnable_kinds(role, cfg)
    if kinds is None or cfg.policy.kind in kinds:
        return []
    runs = " or ".join(k.value for k in kinds)
    message = f"`robotrl {role}` cannot run the {cfg.policy.kind.value} policy (it runs {runs})"
    return [("policy.kind", message + HINTS.get(role, ""))]
