"""FlowChunkPolicy: robotrl's own VLA-shaped chunk policy, trained by flow matching.

Context (computed once per inference): a small CNN per camera (shared weights, a
camera embedding) read out by spatial-softmax keypoints into four tokens
(:mod:`robotrl.policy.vision`), a proprioception token, and one
language token from a hashed word/bigram embedding (no tokenizer, no download). A
transformer encoder mixes them. The action head is a transformer decoder over H
action tokens that cross-attends to the context; it predicts the flow velocity and
is integrated from noise (t=0) to actions (t=1) in ``flow_steps`` Euler steps, so
the context cost is paid once and each step costs only the head.

Real-time chunking is trained in (training-time RTC): the first d rows of a chunk
are the committed prefix, given clean with flow time 1, and carry no loss. At
inference the prefix rows are clamped to the given prefix at every step, so the
continuation is generated conditioned on it and the prefix is returned bit-exact.
Actions and state are z-scored with statistics from the training data, which the
checkpoint stores beside the weights; state features that were (nearly) constant in the
training data are held at 0.
"""

from __future__ import annotations

import itertools
import math
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from robotrl.config.policy import PolicyConfig, PolicyKind, PolicySize
from robotrl.core import keys
from robotrl.core.types import EnvSpec, FloatArray, Observation
from robotrl.policy.checkpoint import (
    CheckpointError,
    expect_architecture,
    policy_cfg_from_dict,
    read_meta,
    spec_from_dict,
    write_meta,
)
from robotrl.policy.inputs import check_observation_shapes
from robotrl.policy.vision import KeypointEncoder
from robotrl.policy.weights import load_parameters

ARCHITECTURE = "robotrl.flow"
WEIGHTS_FILE = "model.safetensors"
STATS_FILE = "normalization.safetensors"
STAT_NAMES = ("state_mean", "state_std", "action_mean", "action_std")
MIN_STD = 1e-3
CONSTANT_STATE_STD = 1e-2
"""A state feature that varied less than this in the training data (a joint the demonstrations
never moved, a velocity that stayed 0) carries nothing the policy could learn from; its
normalised value is held at 0. Z-scored by its tiny std instead, the policy's own small
deviations there blew up to thousands of sigmas (46 000 for the wrist roll velocity on the
tracking task) and the chunks became noise."""
IMAGE_TOKENS = 4  # context tokens per camera


@dataclass(frozen=True)
class FlowSize:
    d_model: int
    heads: int
    encoder_layers: int
    decoder_layers: int
    cnn_channels: tuple[int, int, int, int]
    """The image encoder's (c1, c2, c3, keypoints): :class:`KeypointEncoder`."""
    vocab: int
    patch: int = 4
    """Consecutive actions per action token: the head's cost falls by this factor."""


SIZES: dict[PolicySize, FlowSize] = {
    PolicySize.tiny: FlowSize(64, 4, 1, 2, (16, 32, 32, 64), 1024),
    # mini: tiny twice as wide (about 3x the parameters, ~2.4x a training step's time on the
    # CPU). On pick-and-place from 50 demonstrations it imitates far better per step than tiny
    # (6000 steps: 72% vs 55%) and fine-tunes higher (see configs/experiment/demo.yaml).
    PolicySize.mini: FlowSize(128, 4, 1, 2, (16, 32, 32, 64), 1024),
    # small: the context encoder runs once per chunk, the decoder once per flow step, so
    # depth goes to the encoder; 2 decoder layers keep a chunk near 15 ms on one CPU core.
    # The image encoder's convolutions run at a quarter of the image's resolution (keypoints need
    # it), so they stay narrow: small's former (24, 48, 96, 256) made a 96x96 two-camera RAPI
    # update 6.6x slower on the CPU (robotrl bench learner: 0.87 updates/s against 5.75).
    PolicySize.small: FlowSize(256, 8, 4, 2, (16, 32, 32, 64), 12288),
    PolicySize.base: FlowSize(512, 8, 6, 6, (32, 64, 64, 128), 16384),
}


def hashed_tokens(text: str, vocab: int) -> list[int]:
    """Word and word-bigram ids by CRC32 modulo ``vocab - 1``, shifted past id 0 (empty text)."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    grams = words + [f"{a} {b}" for a, b in itertools.pairwise(words)]
    return [1 + zlib.crc32(g.encode()) % (vocab - 1) for g in grams] or [0]


def time_embedding(t: Tensor, dim: int) -> Tensor:
    """Sinusoidal embedding of flow times ``t`` (any shape) -> (..., dim)."""
    half = dim // 2
    freqs = torch.exp(-math.log(1000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    angles = t.float().unsqueeze(-1) * freqs * 100.0
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


class FlowChunkPolicy(nn.Module):
    """A flow-matching chunk policy with prefix conditioning; implements ``ChunkPolicy``."""

    state_mean: Tensor
    state_std: Tensor
    action_mean: Tensor
    action_std: Tensor

    def __init__(self, spec: EnvSpec, cfg: PolicyConfig) -> None:
        super().__init__()
        if cfg.kind is not PolicyKind.flow:
            raise ValueError(f"FlowChunkPolicy needs policy.kind=flow, got {cfg.kind.value}")
        if not 0 <= cfg.max_delay < cfg.horizon:
            raise ValueError(f"policy.max_delay must be in [0, horizon={cfg.horizon}), got {cfg.max_delay}")
        self.spec, self.cfg = spec, cfg
        self.size = SIZES[cfg.size]
        d, sz = self.size.d_model, self.size
        self.cameras = tuple(sorted(spec.camera_shapes))
        self.image_encoder = KeypointEncoder(sz.cnn_channels, IMAGE_TOKENS * d) if self.cameras else None
        self.camera_embed = nn.Parameter(torch.zeros(max(len(self.cameras), 1), 1, d))
        self.state_proj = nn.Linear(max(spec.state_dim, 1), d)
        self.language = nn.EmbeddingBag(sz.vocab, d, mode="mean")
        self.context_pos = nn.Parameter(torch.zeros(1, 2 + IMAGE_TOKENS * len(self.cameras), d))
        enc = nn.TransformerEncoderLayer(d, sz.heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(enc, sz.encoder_layers, enable_nested_tensor=False)
        self.tokens = -(-cfg.horizon // sz.patch)  # action tokens; the last may be padded
        self.action_in = nn.Linear(sz.patch * (spec.action_dim + 1), d)  # actions + prefix flag per row
        self.time_mlp = nn.Sequential(nn.Linear(d, d), nn.SiLU(), nn.Linear(d, d))
        self.action_pos = nn.Parameter(torch.zeros(1, self.tokens, d))
        dec = nn.TransformerDecoderLayer(d, sz.heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.decoder = nn.TransformerDecoder(dec, sz.decoder_layers)
        self.head = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, sz.patch * spec.action_dim))
        nn.init.normal_(self.context_pos, std=0.02)
        nn.init.normal_(self.action_pos, std=0.02)
        nn.init.normal_(self.camera_embed, std=0.02)
        low, high = spec.action_bounds()
        self.register_buffer("state_mean", torch.zeros(spec.state_dim), persistent=False)
        self.register_buffer("state_std", torch.ones(spec.state_dim), persistent=False)
        self.register_buffer("action_mean", torch.from_numpy((low + high) / 2), persistent=False)
        self.register_buffer(
            "action_std", torch.from_numpy(np.maximum((high - low) / 2, MIN_STD)), persistent=False
        )
        self._task_cache: dict[str, tuple[Tensor, Tensor]] = {}
        self._generator: torch.Generator | None = None

    # ------------------------------------------------------------------ properties
    @property
    def horizon(self) -> int:
        return self.cfg.horizon

    @property
    def action_dim(self) -> int:
        return self.spec.action_dim

    @property
    def device(self) -> torch.device:
        return self.action_pos.device

    # ------------------------------------------------------------------ normalisation
    def set_normalization(self, stats: Mapping[str, npt.NDArray[np.floating[Any]]]) -> None:
        """Install state/action mean and std (from the training data); std is floored at MIN_STD."""
        for name in STAT_NAMES:
            if name not in stats:
                raise KeyError(f"normalisation statistics are missing {name!r}")
            buf: Tensor = getattr(self, name)
            value = torch.as_tensor(np.asarray(stats[name], dtype=np.float32))
            if value.shape != buf.shape:
                raise ValueError(
                    f"normalisation {name!r}: expected shape {tuple(buf.shape)}, got {tuple(value.shape)}"
                )
            if name.endswith("_std"):
                value = value.clamp_min(MIN_STD)
            buf.copy_(value)

    def normalization(self) -> dict[str, FloatArray]:
        return {name: getattr(self, name).detach().cpu().numpy().copy() for name in STAT_NAMES}

    # ------------------------------------------------------------------ network
    def _task_ids(self, tasks: list[str]) -> tuple[Tensor, Tensor]:
        """Flat token ids and bag offsets; one instruction's ids are cached (the actor repeats it)."""
        if len(tasks) == 1 and tasks[0] in self._task_cache:
            return self._task_cache[tasks[0]]
        ids: list[int] = []
        offsets: list[int] = []
        for task in tasks:
            offsets.append(len(ids))
            ids.extend(hashed_tokens(task, self.size.vocab))
        dev = self.device
        out = torch.tensor(ids, device=dev), torch.tensor(offsets, device=dev)
        if len(tasks) == 1:
            self._task_cache = {tasks[0]: out}
        return out

    def encode_context(self, state: Tensor, images: Mapping[str, Tensor], tasks: list[str]) -> Tensor:
        """(B, tokens, d) context from raw state (B, S), uint8 images (B, H, W, 3) and B instructions."""
        state_n = (state.float() - self.state_mean) / self.state_std
        state_n = torch.where(self.state_std >= CONSTANT_STATE_STD, state_n, 0.0)
        if self.spec.state_dim == 0:
            state_n = torch.zeros(state.shape[0], 1, device=self.device)
        tokens = [self.state_proj(state_n).unsqueeze(1)]
        tokens.append(self.language(*self._task_ids(tasks)).unsqueeze(1))
        if self.image_encoder is not None:
            feats = self._camera_features(images)
            feats = feats.reshape(*feats.shape[:-1], IMAGE_TOKENS, -1)
            tokens.extend((feats + self.camera_embed.unsqueeze(1)).unbind(0))
        ctx = torch.cat(tokens, dim=1) + self.context_pos
        out: Tensor = self.encoder(ctx)
        return out

    def _camera_features(self, images: Mapping[str, Tensor]) -> Tensor:
        """(cameras, B, features): one CNN pass per image shape (cameras of a real arm may differ)."""
        assert self.image_encoder is not None
        by_shape: dict[tuple[int, ...], list[str]] = {}
        for cam in self.cameras:
            by_shape.setdefault(tuple(images[cam].shape[1:]), []).append(cam)
        feats: dict[str, Tensor] = {}
        for group in by_shape.values():
            out = self.image_encoder(torch.cat([images[c] for c in group])).unflatten(0, (len(group), -1))
            feats |= dict(zip(group, out.unbind(0), strict=True))
        return torch.stack([feats[c] for c in self.cameras])

    def velocity(self, x: Tensor, in_prefix: Tensor, t: Tensor, context: Tensor) -> Tensor:
        """Flow velocity (B, H, A) for normalised chunks ``x`` (B, H, A) at flow times ``t`` (B,).

        Rows flagged ``in_prefix`` (B, H) hold the clean committed prefix (time 1).
        """
        b, h, a = x.shape
        pad = self.tokens * self.size.patch - h
        rows = torch.cat([x, in_prefix.to(x.dtype).unsqueeze(-1)], dim=-1)
        if pad:
            rows = nn.functional.pad(rows, (0, 0, 0, pad))
        tok = self.action_in(rows.reshape(b, self.tokens, -1))
        tok = tok + self.time_mlp(time_embedding(t, self.size.d_model)).unsqueeze(1) + self.action_pos
        out: Tensor = self.head(self.decoder(tok, context)).reshape(b, -1, a)[:, :h]
        return out

    # ------------------------------------------------------------------ training
    def per_sample_loss(self, batch: Mapping[str, Any], generator: torch.Generator | None = None) -> Tensor:
        """Flow-matching loss per sample (B,), over rows after the prefix that the mask keeps.

        Rows before ``prefix_len`` are given clean with flow time 1 (training-time
        RTC); a sample with no row to learn from has loss 0.
        """
        state, images, tasks, actions = self._batch_inputs(batch)
        b, h, _ = actions.shape
        prefix_len = _require(batch, keys.PREFIX_LEN).to(self.device).long()
        mask = _require(batch, keys.ACTION_MASK).to(self.device).bool()
        if prefix_len.shape != (b,) or mask.shape != (b, h):
            raise ValueError(
                f"batch: prefix_len must be ({b},) and action_mask ({b}, {h}), "
                f"got {tuple(prefix_len.shape)} and {tuple(mask.shape)}"
            )
        x1 = (actions - self.action_mean) / self.action_std
        noise = torch.randn(x1.shape, generator=generator, device=self.device)
        t = torch.rand(b, generator=generator, device=self.device)
        in_prefix = torch.arange(h, device=self.device) < prefix_len.unsqueeze(1)
        t_rows = torch.where(in_prefix, 1.0, t.unsqueeze(1)).unsqueeze(-1)
        xt = t_rows * x1 + (1 - t_rows) * noise
        pred = self.velocity(xt, in_prefix, t, self.encode_context(state, images, tasks))
        row_loss = (pred - (x1 - noise)).square().mean(-1)
        keep = (mask & ~in_prefix).float()
        loss: Tensor = (row_loss * keep).sum(-1) / keep.sum(-1).clamp_min(1.0)
        return loss

    def _batch_inputs(self, batch: Mapping[str, Any]) -> tuple[Tensor, dict[str, Tensor], list[str], Tensor]:
        dev = self.device
        state = _require(batch, keys.STATE).to(dev)
        actions = _require(batch, keys.ACTION).to(dev).float()
        b = state.shape[0]
        if state.shape != (b, self.spec.state_dim):
            raise ValueError(
                f"batch {keys.STATE!r}: expected (B, {self.spec.state_dim}), got {tuple(state.shape)}"
            )
        if actions.shape != (b, self.horizon, self.action_dim):
            raise ValueError(
                f"batch {keys.ACTION!r}: expected ({b}, {self.horizon}, {self.action_dim}), "
                f"got {tuple(actions.shape)}"
            )
        images = {}
        for cam in self.cameras:
            key = keys.IMAGE_PREFIX + cam
            img = _require(batch, key)
            if img.ndim != 4 or img.shape[0] != b or img.shape[-1] != 3:
                raise ValueError(f"batch {key!r}: expected (B, H, W, 3) uint8, got {tuple(img.shape)}")
            images[cam] = img.to(dev)
        tasks = list(_require(batch, keys.TASK))
        if len(tasks) != b:
            raise ValueError(f"batch {keys.TASK!r}: expected {b} strings, got {len(tasks)}")
        return state, images, tasks, actions

    # ------------------------------------------------------------------ inference
    def check_observation(self, obs: Observation) -> None:
        """Raise ValueError naming the key when ``obs`` does not fit this policy."""
        cameras = {cam: tuple(self.spec.camera_shapes[cam]) for cam in self.cameras}
        check_observation_shapes(obs, (self.spec.state_dim,), cameras)

    def infer(
        self,
        observation: Observation,
        prefix: FloatArray | None,
        delay: int,
        noise: FloatArray | None = None,
    ) -> FloatArray:
        """An (H, A) chunk whose first ``delay`` rows are ``prefix`` exactly.

        ``noise`` (H, A) fixes the flow's starting point (tests, reproducible
        evaluation); otherwise it is drawn from the policy's generator
        (:meth:`seed`) or torch's global one, times ``policy.noise_scale``.
        """
        self.check_observation(observation)
        prefix_arr = self._check_prefix(prefix, delay)
        dev = self.device
        with torch.inference_mode():
            state = torch.as_tensor(np.asarray(observation.state, dtype=np.float32), device=dev).unsqueeze(0)
            images = {
                c: torch.as_tensor(observation.images[c], device=dev).unsqueeze(0) for c in self.cameras
            }
            task = observation.instruction or self.spec.instruction
            context = self.encode_context(state, images, [task])
            x = self._initial_noise(noise)
            in_prefix = torch.zeros(1, self.horizon, dtype=torch.bool, device=dev)
            clean_prefix = None
            if delay:
                p = torch.as_tensor(prefix_arr, device=dev)
                clean_prefix = ((p - self.action_mean) / self.action_std).unsqueeze(0)
                x[:, :delay] = clean_prefix
                in_prefix[:, :delay] = True
            steps = self.cfg.flow_steps
            for k in range(steps):
                t = torch.full((1,), k / steps, device=dev)
                x = x + self.velocity(x, in_prefix, t, context) / steps
                if clean_prefix is not None:
                    x[:, :delay] = clean_prefix
            out = (x[0] * self.action_std + self.action_mean).cpu().numpy().astype(np.float32)
        if delay:
            out[:delay] = prefix_arr
        return out

    def _check_prefix(self, prefix: FloatArray | None, delay: int) -> FloatArray:
        if not 0 <= delay <= self.horizon:
            raise ValueError(f"delay must be in [0, horizon={self.horizon}], got {delay}")
        if delay == 0:
            return np.zeros((0, self.action_dim), dtype=np.float32)
        if prefix is None:
            raise ValueError(f"delay={delay} needs a prefix of shape ({delay}, {self.action_dim}), got None")
        arr = np.asarray(prefix, dtype=np.float32)
        if arr.shape != (delay, self.action_dim):
            raise ValueError(f"prefix: expected shape ({delay}, {self.action_dim}), got {arr.shape}")
        return arr

    def _initial_noise(self, noise: FloatArray | None) -> Tensor:
        shape = (1, self.horizon, self.action_dim)
        if noise is None:
            drawn = torch.randn(shape, generator=self._generator, device=self._generator_device())
            return drawn * self.cfg.noise_scale
        arr = np.asarray(noise, dtype=np.float32)
        if arr.shape != shape[1:]:
            raise ValueError(f"noise: expected shape {shape[1:]}, got {arr.shape}")
        return torch.as_tensor(arr, device=self.device).unsqueeze(0).clone()

    def _generator_device(self) -> torch.device:
        return self._generator.device if self._generator is not None else self.device

    def seed(self, seed: int) -> None:
        """Draw inference noise from a generator seeded with ``seed`` (reproducible rollouts)."""
        self._generator = torch.Generator(device=self.device).manual_seed(seed)

    # ------------------------------------------------------------------ weights
    def trainable_tensors(self) -> dict[str, npt.NDArray[np.generic]]:
        """Every parameter as a CPU numpy copy (a snapshot: later training does not change it)."""
        return {name: p.detach().to("cpu", copy=True).numpy() for name, p in self.named_parameters()}

    def load_weights(
        self, tensors: Mapping[str, npt.NDArray[np.generic]], *, zero_copy: bool = False
    ) -> None:
        """Load ``tensors`` (all parameters or a subset); everything is checked before anything changes."""
        load_parameters(self, tensors, zero_copy=zero_copy, owner=f"this {self.cfg.size.value} flow policy")

    def save(self, path: str | Path) -> None:
        """Write a checkpoint directory: config JSON, weights and normalisation (safetensors)."""
        out = Path(path)
        write_meta(out, ARCHITECTURE, self.cfg, self.spec)
        state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        save_file(state, str(out / WEIGHTS_FILE), metadata={"architecture": ARCHITECTURE})
        stats = {k: torch.from_numpy(v) for k, v in self.normalization().items()}
        save_file(stats, str(out / STATS_FILE))

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu") -> FlowChunkPolicy:
        """Rebuild a policy from :meth:`save`'s directory; refuses other architectures."""
        src = Path(path)
        meta = read_meta(src)
        expect_architecture(src, meta, ARCHITECTURE)
        policy = cls(spec_from_dict(meta["spec"]), policy_cfg_from_dict(meta["policy"]))
        try:
            missing, unexpected = policy.load_state_dict(load_file(str(src / WEIGHTS_FILE)), strict=False)
        except RuntimeError as exc:
            raise CheckpointError(
                f"{src / WEIGHTS_FILE}: does not fit the policy its config describes: {exc}"
            ) from exc
        if missing or unexpected:
            raise CheckpointError(f"{src / WEIGHTS_FILE}: missing tensors {missing}, unexpected {unexpected}")
        stats = load_file(str(src / STATS_FILE))
        policy.set_normalization({k: v.numpy() for k, v in stats.items()})
        return policy.to(device).eval()


def _require(batch: Mapping[str, Any], key: str) -> Any:
    if key not in batch:
        raise KeyError(f"batch is missing {key!r} (has {sorted(batch)})")
    return batch[key]


def parameter_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
