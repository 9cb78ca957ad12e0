"""A small but real chunk policy for learner tests, its toy env spec, a learner config sized for it.

A Gaussian-mean MLP: state and the committed prefix in, the H x A chunk out; its
per-sample loss is the squared error over the rows the policy chooses (after the
prefix, before the padding), so a weighted loss moves it to the weighted mean of
the executed chunks, exactly what advantage weighting should do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from robotrl.config.learner import GuardConfig, LearnerConfig, RapiConfig
from robotrl.config.schema import RobotRLConfig
from robotrl.core import keys
from robotrl.core.types import EnvSpec, Observation


class MLPChunkPolicy(nn.Module):
    def __init__(self, state_dim: int, horizon: int, action_dim: int, hidden: int = 64) -> None:
        super().__init__()
        self._h, self._a = horizon, action_dim
        self.net = nn.Sequential(
            nn.Linear(state_dim + horizon * action_dim + horizon, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, horizon * action_dim),
        )

    @property
    def horizon(self) -> int:
        return self._h

    @property
    def action_dim(self) -> int:
        return self._a

    def _forward(self, state: torch.Tensor, prefix: torch.Tensor, prefix_len: torch.Tensor) -> torch.Tensor:
        committed = torch.arange(self._h, device=state.device)[None, :] < prefix_len[:, None]
        given = (prefix * committed[..., None]).flatten(1)
        x = torch.cat([state.float(), given, committed.float()], dim=-1)
        out = self.net(x).view(-1, self._h, self._a)
        return torch.where(committed[..., None], prefix, out)

    def per_sample_loss(self, batch: Mapping[str, Any]) -> torch.Tensor:
        action = batch[keys.ACTION].float()
        prefix_len = batch[keys.PREFIX_LEN]
        pred = self._forward(batch[keys.STATE], action, prefix_len)
        chosen = batch[keys.ACTION_MASK] & (
            torch.arange(self._h, device=action.device)[None, :] >= prefix_len[:, None]
        )
        err = ((pred - action) ** 2).mean(-1) * chosen
        return err.sum(-1) / chosen.sum(-1).clamp(min=1)

    @torch.no_grad()
    def infer(self, observation: Observation, prefix: np.ndarray | None, delay: int) -> np.ndarray:
        state = torch.as_tensor(observation.state)[None]
        pre = torch.zeros(1, self._h, self._a)
        if prefix is not None and delay:
            pre[0, :delay] = torch.as_tensor(prefix[:delay])
        return self._forward(state, pre, torch.tensor([delay]))[0].numpy()

    def trainable_tensors(self) -> dict[str, np.ndarray]:
        return {k: v.detach().to("cpu", copy=True).numpy() for k, v in self.named_parameters()}

    def load_weights(self, tensors: Mapping[str, np.ndarray], *, zero_copy: bool = False) -> None:
        own = self.state_dict()
        if set(tensors) != set(own):
            raise ValueError("weight names differ")
        self.load_state_dict({k: torch.as_tensor(np.asarray(v)) for k, v in tensors.items()})


def toy_spec(cameras: Mapping[str, tuple[int, int, int]] | None = None) -> EnvSpec:
    """The env MLPChunkPolicy(2, 4, 3) and episode_batch fit: 2 state values, 3 actions in [-1, 1]."""
    return EnvSpec(
        "toy",
        action_names=("a0", "a1", "a2"),
        action_low=(-1.0,) * 3,
        action_high=(1.0,) * 3,
        state_names=("s0", "s1"),
        camera_shapes=dict(cameras or {}),
        max_episode_ticks=20,
    )


def small_learner_config(run_dir: str, rapi: RapiConfig, **learner: Any) -> RobotRLConfig:
    """A config whose learner trains MLPChunkPolicy(2, 4, 3) on the CPU in seconds: horizon 4, batches of 16
    from the 16th row on, admitting episode_batch's actions; ``rapi`` and ``learner`` (LearnerConfig
    fields) set what a test varies."""
    cfg = RobotRLConfig()
    cfg.run_dir = run_dir
    cfg.policy.horizon, cfg.policy.max_delay = 4, 2
    small = {
        "batch_size": 16,
        "actor_updates_per_group": 1,
        "learning_starts": 16,
        "anchor_capacity": 500,
        "fastest_successes": 2,
        "device": "cpu",
        # episode_batch writes (episode, tick) into the actions, far outside the toy spec's [-1, 1]
        "guard": GuardConfig(action_margin=1000.0),
    }
    cfg.learner = LearnerConfig(rapi=rapi, **(small | learner))
    return cfg


def image_code(episode: int, tick: int) -> int:
    """The pixel value every camera shows at (episode, tick): lets a test spot a torn sample."""
    return (episode * 37 + tick) % 251


def episode_batch(
    actor_id: str,
    episode_id: int,
    ticks: range,
    *,
    end: str | None = None,
    with_next: bool = True,
    cameras: Mapping[str, tuple[int, int, int]] | None = None,
    rewards: Any = None,
    state_dim: int = 2,
    action_dim: int = 3,
    version: int = 0,
    delay: int = 2,
    intervention: Any = None,
) -> Any:
    """Ticks ``ticks`` of one episode as a TransitionBatch whose state, action and images encode
    (episode, tick). ``end`` is None (episode continues), 'terminated' or 'truncated'; the
    next observation (tick + 1) is attached to the last row when ``with_next``."""
    from robotrl.core.batch import TransitionBatch
    from robotrl.core.types import Transition

    cams = dict(cameras or {})

    def obs(tick: int) -> Observation:
        state = np.zeros(state_dim, np.float32)
        state[0], state[1] = episode_id, tick
        imgs = {c: np.full(s, image_code(episode_id, tick), np.uint8) for c, s in cams.items()}
        return Observation(tick, state, imgs, "task")

    out = []
    for k, tick in enumerate(ticks):
        last = k == len(ticks) - 1
        action = np.zeros(action_dim, np.float32)
        action[: min(2, action_dim)] = (episode_id, tick)[: min(2, action_dim)]
        out.append(
            Transition(
                actor_id=actor_id,
                episode_id=episode_id,
                tick=tick,
                observation=obs(tick),
                action=action,
                proposed_action=action,
                reward=float(rewards[k]) if rewards is not None else 0.0,
                terminated=last and end == "terminated",
                truncated=last and end == "truncated",
                intervention=bool(intervention[k]) if intervention is not None else False,
                chunk_id=tick // 4,
                index_in_chunk=tick % 4,
                policy_version=version,
                delay_ticks=delay,
                next_observation=obs(tick + 1) if last and end is not None and with_next else None,
            )
        )
    return TransitionBatch.from_transitions(out)
