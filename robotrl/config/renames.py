"""Config fields that moved, old dotted name -> new: an old name in an override or a preset
fails with a config error that names the new one, instead of Hydra's "not in struct"."""

from __future__ import annotations

from collections.abc import Iterable

RENAMED: dict[str, str] = {
    # RAPI's own settings moved into learner.rapi (BC reads none of them).
    "learner.expectile": "learner.rapi.expectile",
    "learner.beta": "learner.rapi.beta",
    "learner.adv_clip": "learner.rapi.adv_clip",
    "learner.weight_ess": "learner.rapi.weight_ess",
    "learner.advantage": "learner.rapi.advantage",
    "learner.intervention_penalty": "learner.rapi.intervention_penalty",
    "learner.critic_updates_per_group": "learner.rapi.critic_updates_per_group",
    "learner.critic_warmup_updates": "learner.rapi.critic_warmup_updates",
    "learner.critic_images": "learner.rapi.critic_images",
    "learner.critic_hidden": "learner.rapi.critic_hidden",
    "learner.target_tau": "learner.rapi.target_tau",
    # The scripted expert's takeover options moved into env.takeover.
    "env.expert_takeover_ticks": "env.takeover.ticks",
    "env.expert_takeover_on_miss": "env.takeover.on_miss",
    "env.expert_takeover_miss_wait_ticks": "env.takeover.miss_wait_ticks",
    "env.expert_takeover_before_miss": "env.takeover.before_miss",
    "env.expert_takeover_reopen_only": "env.takeover.reopen_only",
    "env.expert_takeover_max_corrections": "env.takeover.max_corrections",
}


def renamed_message(old: str) -> str | None:
    """What to say about the dotted key ``old`` when it is a renamed field; None otherwise."""
    new = RENAMED.get(old)
    return None if new is None else f"was renamed {new}"


def override_key(override: str) -> str:
    """The dotted key of a Hydra override: ``+a.b=1`` -> ``a.b``, ``~a.b`` -> ``a.b``."""
    return override.partition("=")[0].lstrip("+~")


def renamed_overrides(overrides: Iterable[str]) -> list[tuple[str, str]]:
    """(old key, message naming the new one) for every override that sets a renamed field."""
    out = []
    for override in overrides:
        key = override_key(override)
        message = renamed_message(key)
        if message:
            out.append((key, message))
    return out
