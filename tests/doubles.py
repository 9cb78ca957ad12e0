"""Small, faithful test doubles for the parts that another issue builds or a test must control.

- :class:`LineEnv`: a RobotEnv whose joints move to the commanded targets; the state
  carries an episode marker so a test can tell which episode an action came from.
- :class:`TickPolicy`: a ChunkPolicy with known outputs: row i of a chunk computed at
  tick t is ``marker * 1000 + t + i + bias`` in every dimension, and the committed
  prefix is reproduced exactly. ``bias`` is its one trainable tensor, so a weight
  update changes every later action visibly.
- :class:`ConstantLatency`, :class:`ListLatency`: latency models with known draws.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from robotrl.core.protocols import StepResult
from robotrl.core.types import OUTCOME_INFO_KEY, OUTCOME_SUCCESS, EnvSpec, FloatArray, Observation


class LineEnv:
    """Joints that reach the commanded target each tick; success when joint 0 passes ``goal``."""

    def __init__(
        self, action_dim: int = 2, max_ticks: int = 40, goal: float = 1e9, hz: float = 30.0, high: float = 1e6
    ) -> None:
        self._spec = EnvSpec(
            name="line",
            action_names=tuple(f"j{i}" for i in range(action_dim)),
            action_low=(-1e6,) * action_dim,
            action_high=(high,) * action_dim,
            state_names=(*(f"q{i}" for i in range(action_dim)), "marker"),
            control_hz=hz,
            max_episode_ticks=max_ticks,
        )
        self.goal = goal
        self.marker = 0.0
        self.q = np.zeros(action_dim, np.float32)
        self.tick = 0
        self.executed: list[FloatArray] = []

    @property
    def spec(self) -> EnvSpec:
        return self._spec

    def _obs(self) -> Observation:
        state = np.concatenate([self.q, [self.marker]]).astype(np.float32)
        return Observation(self.tick, state, instruction="follow the line", timestamp=self.tick / 30.0)

    def reset(self, seed: int | None = None) -> Observation:
        self.marker = float(seed or 0)
        self.q = np.zeros_like(self.q)
        self.tick = 0
        self.executed = []
        return self._obs()

    def step(self, action: FloatArray) -> StepResult:
        if action.shape != self.q.shape or not np.isfinite(action).all():
            raise ValueError(f"bad action {action}")
        self.executed.append(np.array(action, copy=True))
        self.q = np.array(action, dtype=np.float32, copy=True)
        self.tick += 1
        success = bool(self.q[0] >= self.goal)
        truncated = self.tick >= self._spec.max_episode_ticks and not success
        info: dict[str, object] = {"is_success": success}
        if success or truncated:  # as the sim's environments say how an episode ended
            info[OUTCOME_INFO_KEY] = OUTCOME_SUCCESS if success else "timeout"
        return StepResult(self._obs(), float(success), success, truncated, info)

    def close(self) -> None:
        pass


class TickPolicy:
    """Known outputs; optionally NaN or wrong-shaped chunks, or errors, on chosen calls."""

    def __init__(
        self,
        horizon: int = 8,
        action_dim: int = 2,
        noise: float = 0.0,
        nan_calls: Sequence[int] = (),
        bad_shape_calls: Sequence[int] = (),
        error_calls: Sequence[int] = (),
        crash_calls: Sequence[int] = (),
        hang_calls: Sequence[int] = (),
        infer_s: float = 0.0,
    ) -> None:
        self._horizon = horizon
        self._action_dim = action_dim
        self.noise = noise
        self.bias = np.zeros(1, np.float32)
        self.calls = 0
        self.prefixes: list[FloatArray | None] = []
        self._nan, self._bad, self._err = set(nan_calls), set(bad_shape_calls), set(error_calls)
        self._crash, self._hang = set(crash_calls), set(hang_calls)
        self.infer_s = infer_s

    @property
    def horizon(self) -> int:
        return self._horizon

    @property
    def action_dim(self) -> int:
        return self._action_dim

    def infer(self, observation: Observation, prefix: FloatArray | None, delay: int) -> FloatArray:
        call = self.calls
        self.calls += 1
        self.prefixes.append(None if prefix is None else prefix.copy())
        if call in self._err:
            raise RuntimeError(f"policy failure on call {call}")
        if call in self._crash:
            os._exit(3)  # a segfaulting extension, as the actor sees it
        if call in self._hang:
            threading.Event().wait(600)  # a deadlocked inference
        if self.infer_s:
            time.sleep(self.infer_s)  # inference time, as a real policy spends it
        marker = float(observation.state[-1])
        rows = np.arange(self._horizon, dtype=np.float32)[:, None] + observation.tick + marker * 1000
        chunk = np.repeat(rows, self._action_dim, axis=1) + self.bias[0]
        if self.noise:
            chunk += self.noise * np.random.standard_normal(chunk.shape).astype(np.float32)
        if prefix is not None and delay:
            chunk[:delay] = prefix[:delay]
        if call in self._nan:
            chunk[-1, 0] = np.nan
        if call in self._bad:
            chunk = chunk[:, :1]
        return chunk.astype(np.float32)

    def per_sample_loss(self, batch: Mapping[str, Any]) -> Any:
        raise NotImplementedError("TickPolicy is never trained")

    def trainable_tensors(self) -> Mapping[str, npt.NDArray[np.generic]]:
        return {"bias": self.bias}

    def load_weights(
        self, tensors: Mapping[str, npt.NDArray[np.generic]], *, zero_copy: bool = False
    ) -> None:
        bias = tensors["bias"]
        if bias.shape != (1,):
            raise ValueError(f"bias has shape {bias.shape}, expected (1,)")
        self.bias[:] = bias


def make_tick_policy(**kwargs: Any) -> TickPolicy:
    """Factory the worker process imports by name ("doubles:make_tick_policy")."""
    return TickPolicy(**kwargs)


class DelayedBiasUpdate:
    """A WeightSource whose one update (a TickPolicy bias) arrives ``after_s`` after it starts."""

    def __init__(self, version: int, bias: float, after_s: float) -> None:
        from robotrl.core.types import WeightUpdate

        self._due = time.monotonic() + after_s
        self._update: Any = WeightUpdate.build(
            version, {"bias": np.array([bias], np.float32)}, subset="trainable"
        )

    def latest(self) -> Any:
        if self._update is None or time.monotonic() < self._due:
            return None
        update, self._update = self._update, None
        return update

    def recv(self, timeout_s: float) -> Any:
        return self.latest()

    def close(self) -> None:
        pass


def make_delayed_bias_update(**kwargs: Any) -> DelayedBiasUpdate:
    """Factory the worker process imports by name ("doubles:make_delayed_bias_update")."""
    return DelayedBiasUpdate(**kwargs)


class ConstantLatency:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def sample_seconds(self, rng: np.random.Generator) -> float:
        return self.seconds


class ListLatency:
    """Draws the given latencies in order, then repeats the last."""

    def __init__(self, seconds: Sequence[float]) -> None:
        self._seconds = list(seconds)
        self._i = 0

    def sample_seconds(self, rng: np.random.Generator) -> float:
        value = self._seconds[min(self._i, len(self._seconds) - 1)]
        self._i += 1
        return value


class LognormalLatency:
    def __init__(self, median_s: float, sigma: float) -> None:
        self.median_s, self.sigma = median_s, sigma

    def sample_seconds(self, rng: np.random.Generator) -> float:
        return float(self.median_s * np.exp(self.sigma * rng.standard_normal()))


class LinearChunkPolicy:
    """A torch Linear as a ChunkPolicy: real tensors to ship, install and compare."""

    def __init__(self, inputs: int, outputs: int) -> None:
        import torch

        self.net = torch.nn.Linear(inputs, outputs)
        self._outputs = outputs

    @property
    def horizon(self) -> int:
        return 1

    @property
    def action_dim(self) -> int:
        return self._outputs

    def infer(self, observation: Observation, prefix: FloatArray | None, delay: int) -> FloatArray:
        import torch

        with torch.no_grad():
            out = self.net(torch.from_numpy(np.asarray(observation.state, np.float32))[None])
        return out.numpy().astype(np.float32)

    def per_sample_loss(self, batch: Mapping[str, Any]) -> Any:
        raise NotImplementedError("never trained")

    def trainable_tensors(self) -> Mapping[str, npt.NDArray[np.generic]]:
        from robotrl.transport.hotswap import module_tensors

        return module_tensors(self.net)

    def load_weights(
        self, tensors: Mapping[str, npt.NDArray[np.generic]], *, zero_copy: bool = False
    ) -> None:
        from robotrl.policy.weights import load_parameters

        load_parameters(self.net, tensors, zero_copy=zero_copy)
