"""LerobotChunkPolicy: any lerobot pretrained policy as a robotrl ``ChunkPolicy``.

Loads ACT, Diffusion, SmolVLA, pi0, pi05 (any registered lerobot policy type) from a
local ``save_pretrained`` directory, offline, with the pre- and post-processors
saved beside it (normalisation, tokenisation, device). What the adapter adds:

- chunk inference from a robotrl :class:`Observation` (uint8 HWC images become the
  float CHW frames lerobot expects);
- prefix handling: policies that implement lerobot's real-time chunking
  (``supports_rtc()`` with an enabled ``rtc_config``: SmolVLA, pi0, pi05) get the
  committed prefix as ``prev_chunk_left_over`` with ``inference_delay``, so RTC
  guidance inpaints the continuation; other policies (ACT, Diffusion) are blended:
  the junction offset between the prefix's last action and the new chunk decays
  linearly over ``blend_ticks``, so the arm does not jump. Either way the first
  ``delay`` rows are the prefix, bit-exact;
- a per-sample loss: ``forward(batch, reduction="none")`` where the policy offers
  it (SmolVLA, pi0, pi05), ACT's L1 + KL per sample, and otherwise one forward per
  sample. Prefix rows are marked as padding, so the loss covers the continuation;
- trainable tensors: the parameters with ``requires_grad`` (a VLA configured to
  train only its action expert ships only that).

Inference runs without autograd: under ``torch.inference_mode()`` for policies that
blend, and under ``torch.no_grad()`` for RTC, whose guidance differentiates through
the denoiser (inference-mode tensors can never require grad).

SmolVLA and pi0.5 build offline from a folder ``robotrl vla init`` made (:mod:`robotrl.policy.vla`:
its ``vlm/`` holds the tokenizer, and SmolVLA's backbone config); a folder in the hub's layout
finds its tokenizer and backbone ids in the local Hugging Face cache. robotrl/policy/README.md
lists what is tested.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor, nn

from robotrl.config.policy import PolicyConfig, PolicyKind
from robotrl.core import keys
from robotrl.core.types import EnvSpec, FloatArray, Observation
from robotrl.policy.checkpoint import (
    LEROBOT_CONFIG,
    META_FILE,
    CheckpointError,
    expect_architecture,
    lerobot_policy_dir,
    read_meta,
    write_meta,
)
from robotrl.policy.flow import MIN_STD
from robotrl.policy.inputs import check_observation_shapes
from robotrl.policy.vla import TABLES_KEY, VLM_FOLDER, building, local_backbone
from robotrl.policy.weights import load_parameters

ARCHITECTURE = "robotrl.lerobot"
UNUSED_TRAINABLE = ("paligemma_with_expert.gemma_expert.lm_head.",)
"""Parameters lerobot leaves trainable that no loss reaches (pi0.5's expert emits hidden states,
never logits): frozen on load, so no update ships them."""
VLM_ATTENTION = {
    "smolvla": r"model\.vlm_with_expert\.vlm\..*text_model\..*\.(q|v)_proj",
    "pi05": r".*\.paligemma\.model\.language_model\..*\.self_attn\.(q|v)_proj",
}
"""The VLM's attention query/value projections, by lerobot policy type: where ``policy.lora_rank``
adds LoRA adapters besides lerobot's own PEFT targets (the expert's and the action projections)."""
STAT_KINDS = ("mean", "std", "min", "max", "q01", "q99")
"""The statistics lerobot's normaliser modes read (mean/std, range, quantiles)."""
BLEND_TICKS = 8


def enable_rtc(policy_cls: type, config: Any) -> bool:
    """Turn on lerobot's RTC guidance for a policy class that implements it; True when on.

    The RTC processor is built in the policy's constructor from ``config.rtc_config``,
    so this must run before the policy is instantiated. The prefix length passed at
    inference bounds the guided rows (lerobot clips its execution horizon to it).
    """
    from lerobot.policies.rtc.configuration_rtc import RTCConfig

    supports = getattr(policy_cls, "supports_rtc", None)
    if not callable(supports) or not supports(None):
        return False
    if getattr(config, "rtc_config", None) is None:
        config.rtc_config = RTCConfig(enabled=True)
    return bool(config.rtc_config.enabled)


def _spec_from_lerobot(config: Any, name: str) -> EnvSpec:
    """An EnvSpec from a lerobot policy config's features (action bounds unknown: infinite)."""
    state = config.input_features.get(keys.STATE)
    action = config.output_features[keys.ACTION]
    cameras = {}
    for key, feat in config.input_features.items():
        if key.startswith(keys.IMAGE_PREFIX):
            c, h, w = feat.shape
            cameras[key.removeprefix(keys.IMAGE_PREFIX)] = (int(h), int(w), int(c))
    dim = int(action.shape[0])
    return EnvSpec(
        name=name,
        action_names=tuple(f"action_{i}" for i in range(dim)),
        action_low=(-float("inf"),) * dim,
        action_high=(float("inf"),) * dim,
        state_names=tuple(f"state_{i}" for i in range(int(state.shape[0]) if state else 0)),
        camera_shapes=cameras,
    )


class LerobotChunkPolicy(nn.Module):
    """A lerobot ``PreTrainedPolicy`` with its processors, behind the ``ChunkPolicy`` protocol."""

    def __init__(
        self, policy: Any, preprocessor: Any, postprocessor: Any, spec: EnvSpec, tables: str | None = None
    ) -> None:
        """``tables``: the shrunk lerobot tables the policy was built with (see
        :func:`robotrl.policy.vla.building`), None for lerobot's own."""
        super().__init__()
        self.policy = policy
        self.tables = tables
        for name, param in policy.named_parameters():
            if any(unused in name for unused in UNUSED_TRAINABLE):
                param.requires_grad_(False)
        self.preprocessor, self.postprocessor = preprocessor, postprocessor
        self.spec = spec
        self.config = policy.config
        self.cameras = tuple(k.removeprefix(keys.IMAGE_PREFIX) for k in self.config.image_features)
        for cam in self.cameras:
            if cam not in spec.camera_shapes:
                raise CheckpointError(
                    f"the lerobot policy reads camera {cam!r}; the env has {sorted(spec.camera_shapes)}"
                )
        self._normalizer = next(
            (s for s in preprocessor.steps if type(s).__name__ == "NormalizerProcessorStep"), None
        )
        forward_params = inspect.signature(lerobot_policy(policy).forward).parameters
        self._forward_reduces = "reduction" in forward_params

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(
        cls,
        path: str | Path,
        spec: EnvSpec | None = None,
        cfg: PolicyConfig | None = None,
        device: str = "cpu",
    ) -> LerobotChunkPolicy:
        """Load from a local lerobot policy folder (see :func:`lerobot_policy_dir`) or a robotrl
        checkpoint of one."""
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors

        found = lerobot_policy_dir(path)
        if found is None:
            raise CheckpointError(
                f"{path}: not a local lerobot policy directory (no {LEROBOT_CONFIG}, nor "
                f"pretrained_model/{LEROBOT_CONFIG}); no hub downloads"
            )
        src = found
        meta: dict[str, Any] = {}
        if (src / META_FILE).is_file():
            meta = read_meta(src)
            expect_architecture(src, meta, ARCHITECTURE)
            if spec is None:
                from robotrl.policy.checkpoint import spec_from_dict

                spec = spec_from_dict(meta["spec"])
        config = PreTrainedConfig.from_pretrained(src)
        config.device = device
        overrides: dict[str, dict[str, Any]] = {"device_processor": {"device": device}}
        backbone = local_backbone(src, config)
        if backbone is not None:  # a folder `robotrl vla init` made, wherever it was moved
            if hasattr(config, "vlm_model_name"):
                config.vlm_model_name = str(backbone)
            overrides["tokenizer_processor"] = {"tokenizer_name": str(backbone)}
        policy_cls = get_policy_class(config.type)
        enable_rtc(policy_cls, config)
        with building(meta):
            policy = policy_cls.from_pretrained(src, config=config)
        if cfg is not None and cfg.lora_rank:
            policy = with_lora(policy, cfg.lora_rank, src)
        pre, post = make_pre_post_processors(
            config, pretrained_path=str(src), preprocessor_overrides=overrides
        )
        adapter = cls(policy, pre, post, spec or _spec_from_lerobot(config, src.name), meta.get(TABLES_KEY))
        if cfg is not None and cfg.kind is not PolicyKind.lerobot:
            raise CheckpointError(f"{src}: a lerobot policy, but policy.kind={cfg.kind.value}")
        return adapter.to(device).eval()

    def save(self, path: str | Path) -> None:
        """lerobot's own files (model, config, processors) plus robotrl's metadata, in one directory;
        a backbone loaded from a local folder is copied in as ``vlm/``, so the folder moves whole."""
        out = Path(path)
        with self._backbone_named(VLM_FOLDER) as backbone:
            merged(self.policy).save_pretrained(out)
            self.preprocessor.save_pretrained(out)
            self.postprocessor.save_pretrained(out)
        if backbone is not None and backbone != (out / VLM_FOLDER).resolve():
            shutil.copytree(backbone, out / VLM_FOLDER, dirs_exist_ok=True)
        cfg = PolicyConfig(kind=PolicyKind.lerobot, horizon=self.horizon, max_delay=0)
        tables = {TABLES_KEY: self.tables} if self.tables else {}
        write_meta(out, ARCHITECTURE, cfg, self.spec, lerobot_type=self.config.type, **tables)

    @contextlib.contextmanager
    def _backbone_named(self, name: str) -> Iterator[Path | None]:
        """While saving: the config and the tokenizer step name a local backbone folder ``name``
        (relative to the saved folder); yields that folder, or None for a hub id or no backbone."""
        steps = [s for s in self.preprocessor.steps if isinstance(getattr(s, "tokenizer_name", None), str)]
        current = next((s.tokenizer_name for s in steps if Path(s.tokenizer_name).is_dir()), None)
        if current is None:
            yield None
            return
        steps = [s for s in steps if s.tokenizer_name == current]
        names_backbone = getattr(self.config, "vlm_model_name", None) == current
        for step in steps:
            step.tokenizer_name = name
        if names_backbone:
            self.config.vlm_model_name = name
        try:
            yield Path(current).resolve()
        finally:
            for step in steps:
                step.tokenizer_name = current
            if names_backbone:
                self.config.vlm_model_name = current

    # ------------------------------------------------------------------ normalisation
    def set_normalization(self, stats: Mapping[str, npt.NDArray[np.floating[Any]]]) -> None:
        """State and action statistics from the training data into lerobot's normaliser and
        unnormaliser steps: ``state_mean``, ``state_std``, ``action_mean``, ``action_std`` (as the
        built-in policy takes them; std floored at ``MIN_STD`` as there) and, where given,
        ``_min``, ``_max``, ``_q01``, ``_q99`` (for policies normalising by range or quantiles)."""
        new: dict[str, dict[str, npt.NDArray[np.float32]]] = {}
        for prefix, key in (("state", keys.STATE), ("action", keys.ACTION)):
            new[key] = {
                name: np.asarray(stats[f"{prefix}_{name}"], np.float32)
                for name in STAT_KINDS
                if f"{prefix}_{name}" in stats
            }
            new[key]["std"] = np.maximum(np.asarray(stats[f"{prefix}_std"], np.float32), MIN_STD)
            new[key]["mean"] = np.asarray(stats[f"{prefix}_mean"], np.float32)
        for step in self._normalization_steps():
            step.stats = {**(step.stats or {}), **new}
            step.to(device=self.device)

    def normalization(self) -> dict[str, FloatArray]:
        """The statistics :meth:`set_normalization` installs, read back from the normaliser."""
        if self._normalizer is None:
            raise ValueError(f"this {self.config.type} policy has no normaliser step")
        stats = self._normalizer.stats
        return {
            f"{prefix}_{name}": np.asarray(stats[key][name], np.float32).copy()
            for prefix, key in (("state", keys.STATE), ("action", keys.ACTION))
            for name in STAT_KINDS
            if name in stats[key]
        }

    def _normalization_steps(self) -> list[Any]:
        names = ("NormalizerProcessorStep", "UnnormalizerProcessorStep")
        return [s for s in (*self.preprocessor.steps, *self.postprocessor.steps) if type(s).__name__ in names]

    # ------------------------------------------------------------------ properties
    @property
    def horizon(self) -> int:
        return int(self.config.chunk_size)

    @property
    def action_dim(self) -> int:
        return int(self.config.output_features[keys.ACTION].shape[0])

    @property
    def device(self) -> torch.device:
        param: Tensor = next(self.policy.parameters())
        return param.device

    @property
    def uses_rtc(self) -> bool:
        """True when the policy takes the prefix through lerobot's RTC guidance (else: blending)."""
        supports = getattr(lerobot_policy(self.policy), "supports_rtc", None)
        rtc = getattr(self.config, "rtc_config", None)
        return bool(callable(supports) and supports() and rtc is not None and rtc.enabled)

    # ------------------------------------------------------------------ inference
    def check_observation(self, obs: Observation) -> None:
        """Raise ValueError naming the key when ``obs`` does not fit the policy's input features."""
        state_feat = self.config.input_features.get(keys.STATE)
        state_shape = None if state_feat is None else tuple(state_feat.shape)
        cameras = {}
        for cam in self.cameras:
            c, h, w = self.config.input_features[keys.IMAGE_PREFIX + cam].shape
            cameras[cam] = (h, w, c)
        check_observation_shapes(obs, state_shape, cameras)

    def _observation_frame(self, obs: Observation) -> dict[str, Any]:
        frame: dict[str, Any] = {
            keys.STATE: torch.as_tensor(np.asarray(obs.state, dtype=np.float32)),
            keys.TASK: obs.instruction or self.spec.instruction,
        }
        for cam in self.cameras:
            frame[keys.IMAGE_PREFIX + cam] = (
                torch.from_numpy(obs.images[cam]).permute(2, 0, 1).float() / 255.0
            )
        return frame

    def infer(self, observation: Observation, prefix: FloatArray | None, delay: int) -> FloatArray:
        """An (H, A) chunk whose first ``delay`` rows are ``prefix`` exactly (RTC or blending after)."""
        self.check_observation(observation)
        if not 0 <= delay <= self.horizon:
            raise ValueError(f"delay must be in [0, horizon={self.horizon}], got {delay}")
        prefix_arr: FloatArray = np.zeros((0, self.action_dim), np.float32)
        if delay:
            if prefix is None:
                raise ValueError(
                    f"delay={delay} needs a prefix of shape ({delay}, {self.action_dim}), got None"
                )
            prefix_arr = np.asarray(prefix, dtype=np.float32)
            if prefix_arr.shape != (delay, self.action_dim):
                raise ValueError(
                    f"prefix: expected shape ({delay}, {self.action_dim}), got {prefix_arr.shape}"
                )
        with self.inference_context():
            batch = self.preprocessor(self._observation_frame(observation))
            if self.uses_rtc:
                left_over = self._normalize_actions(torch.as_tensor(prefix_arr)) if delay else None
                raw = self.policy.predict_action_chunk(
                    batch, inference_delay=delay, prev_chunk_left_over=left_over
                )
            else:
                raw = self.policy.predict_action_chunk(batch)
            chunk = self.postprocessor(raw)
        out = np.array(chunk.reshape(-1, self.action_dim)[: self.horizon].cpu().numpy(), dtype=np.float32)
        if delay:
            if not self.uses_rtc:
                blend_into_prefix(out, prefix_arr)
            out[:delay] = prefix_arr
        return out

    def inference_context(self) -> contextlib.AbstractContextManager[Any]:
        """No autograd for a chunk: ``no_grad`` under RTC, whose guidance takes a gradient of
        the denoiser inside ``enable_grad`` (impossible in inference mode), else ``inference_mode``."""
        return torch.no_grad() if self.uses_rtc else torch.inference_mode()

    def _normalize_actions(self, actions: Tensor) -> Tensor:
        if self._normalizer is None:
            return actions.to(self.device)
        normalized: Tensor = self._normalizer._normalize_action(actions.to(self.device), inverse=False)
        return normalized

    # ------------------------------------------------------------------ training
    def _lerobot_batch(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        for key in (keys.STATE, keys.ACTION, keys.PREFIX_LEN, keys.ACTION_MASK, keys.TASK):
            if key not in batch:
                raise KeyError(f"batch is missing {key!r} (has {sorted(batch)})")
        actions = batch[keys.ACTION].float()
        h = actions.shape[1]
        if h != self.horizon:
            raise ValueError(f"batch {keys.ACTION!r}: expected horizon {self.horizon}, got {h}")
        in_prefix = torch.arange(h, device=actions.device) < batch[keys.PREFIX_LEN].to(
            actions.device
        ).unsqueeze(1)
        frame: dict[str, Any] = {
            keys.STATE: batch[keys.STATE].float(),
            keys.ACTION: actions,
            # Without prefix conditioning in the model, the prefix is excluded from the loss as padding.
            "action_is_pad": in_prefix | ~batch[keys.ACTION_MASK].to(actions.device).bool(),
            keys.TASK: list(batch[keys.TASK]),
        }
        for cam in self.cameras:
            key = keys.IMAGE_PREFIX + cam
            if key not in batch:
                raise KeyError(f"batch is missing {key!r} (has {sorted(batch)})")
            frame[key] = batch[key].permute(0, 3, 1, 2).float() / 255.0
        out: dict[str, Any] = self.preprocessor(frame)
        return out

    def per_sample_loss(self, batch: Mapping[str, Any]) -> Tensor:
        """The policy's own training loss per sample (B,), over rows after the prefix."""
        lb = self._lerobot_batch(batch)
        if self._forward_reduces:
            losses, _ = self.policy.forward(lb, reduction="none")
            out: Tensor = losses
            return out
        if self.config.type == "act":
            act_loss: Tensor = self._act_per_sample_loss(lb)
            return act_loss
        per_sample = []
        b = lb[keys.ACTION].shape[0]
        for i in range(b):
            one = {
                k: (v[i : i + 1] if isinstance(v, Tensor) and v.shape[:1] == (b,) else v)
                for k, v in lb.items()
            }
            loss, _ = self.policy.forward(one)
            per_sample.append(loss.reshape(()))
        return torch.stack(per_sample)

    def _act_per_sample_loss(self, lb: dict[str, Any]) -> Tensor:
        """ACT's L1 (over valid rows) + KL weight x KL, per sample rather than batch-averaged."""
        cfg = self.config
        model_batch = dict(lb)
        if cfg.image_features:
            model_batch["observation.images"] = [lb[key] for key in cfg.image_features]
        actions_hat, (mu, log_sigma_x2) = self.policy.model(model_batch)
        valid = (~lb["action_is_pad"]).unsqueeze(-1).float()
        l1: Tensor = ((lb[keys.ACTION] - actions_hat).abs() * valid).sum((1, 2)) / (
            valid.sum((1, 2)) * actions_hat.shape[-1]
        ).clamp_min(1)
        if cfg.use_vae and log_sigma_x2 is not None:
            kld = (-0.5 * (1 + log_sigma_x2 - mu.pow(2) - log_sigma_x2.exp())).sum(-1)
            out: Tensor = l1 + kld * cfg.kl_weight
            return out
        return l1

    def prepare_training(self, device: torch.device) -> None:
        """Ready to train on ``device``: the model, its normalisation statistics and the processors'
        device step moved there, and lerobot's gradient checkpointing on where the policy has it
        (pi0.5: its joint attention puts the frozen VLM's activations in the graph of the expert's
        loss, and the full model at batch 8 outgrew 24 GiB on a CPU without it)."""
        self.to(device)
        for step in self.preprocessor.steps:
            if type(step).__name__ == "DeviceProcessorStep":
                step.device = str(device)
                step.__post_init__()
        for step in self._normalization_steps():
            step.to(device=device)
        model = getattr(lerobot_policy(self.policy), "model", None)
        enable = getattr(model, "gradient_checkpointing_enable", None)
        if callable(enable):
            enable()
            self.config.gradient_checkpointing = True

    # ------------------------------------------------------------------ weights
    def trainable_tensors(self) -> dict[str, npt.NDArray[np.generic]]:
        """Parameters with ``requires_grad`` as CPU numpy copies."""
        return {
            name: p.detach().to("cpu", copy=True).float().numpy()
            for name, p in self.policy.named_parameters()
            if p.requires_grad
        }

    def load_weights(
        self, tensors: Mapping[str, npt.NDArray[np.generic]], *, zero_copy: bool = False
    ) -> None:
        """Load ``tensors`` into the lerobot policy; everything is checked before anything changes."""
        load_parameters(self.policy, tensors, zero_copy=zero_copy, owner=f"this {self.config.type} policy")


def with_lora(policy: Any, rank: int, src: Path) -> Any:
    """``policy`` wrapped by lerobot's ``wrap_with_peft`` with LoRA adapters of ``rank`` on its own
    default targets and on the VLM's attention (:data:`VLM_ATTENTION`); every base weight frozen."""
    from peft import LoraConfig

    vlm = VLM_ATTENTION.get(policy.config.type)
    if vlm is None:
        raise CheckpointError(
            f"policy.lora_rank={rank}: LoRA is set up for {sorted(VLM_ATTENTION)}, not {policy.config.type!r}"
        )
    own = policy._get_default_peft_targets()["target_modules"]
    policy.config.pretrained_path = src  # lerobot refuses PEFT on a policy with no pretrained origin
    return policy.wrap_with_peft(LoraConfig(r=rank, target_modules=f"({own}|{vlm})"))


def lerobot_policy(policy: Any) -> Any:
    """The lerobot policy itself, under a PEFT wrapper if there is one."""
    base = getattr(policy, "get_base_model", None)
    return base() if callable(base) else policy


def merged(policy: Any) -> Any:
    """What a folder saves: the lerobot policy, with LoRA adapters merged into a copy's weights
    (a plain lerobot folder, loadable with or without ``policy.lora_rank``)."""
    if not callable(getattr(policy, "merge_and_unload", None)):
        return policy
    plain = copy.deepcopy(policy).merge_and_unload()
    plain.config.use_peft = False
    return plain


def blend_into_prefix(chunk: FloatArray, prefix: FloatArray, ticks: int = BLEND_TICKS) -> None:
    """Shift ``chunk``'s continuation towards where ``prefix`` ends, the shift fading over ``ticks``.

    For policies that cannot take a prefix: row ``d`` (the first chosen action)
    continues from the prefix's last action as the new chunk's own row ``d - 1``
    would, and by ``ticks`` rows later the policy's own plan is back in charge.
    """
    d = len(prefix)
    if d == 0 or d >= len(chunk):
        return
    offset = prefix[-1] - chunk[d - 1]
    window = min(ticks, len(chunk) - d - 1)  # the last row is always the policy's own
    fade = (window - np.arange(window, dtype=np.float32)) / (window + 1)
    chunk[d : d + window] += fade[:, None] * offset
