"""`robotrl vla init`: a real VLA (lerobot's own SmolVLA) made offline, with random weights.

No hub is reachable here, so the folder holds everything lerobot would fetch: the policy's
``save_pretrained`` files and processors, and, in ``vlm/``, a SmolVLM-style backbone config
with a tokenizer made locally with the ``tokenizers`` library (word-level, with the special
tokens SmolVLA reads by name). The backbone is built from that config
(``load_vlm_weights=False``), so every tensor is random: the architecture is the true one,
the knowledge is not. ``tiny`` trains on 2 CPU cores; ``full`` has SmolVLA's published
shapes (a SmolVLM2-500M-sized backbone cut to 16 layers: about 450M parameters).

The folder is relocatable: its config names the backbone as ``vlm``, which
:class:`~robotrl.policy.lerobot.LerobotChunkPolicy` re-points to the folder it loads from.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from robotrl.core import keys
from robotrl.core.types import EnvSpec

log = logging.getLogger(__name__)

VLM_FOLDER = "vlm"
"""The backbone's folder inside a VLA folder, and the name its config gives the backbone."""

SPECIAL_TOKENS = {"pad_token": "<pad>", "unk_token": "<unk>", "bos_token": "<|im_start|>"}
IMAGE_TOKENS = {
    "fake_image_token": "<fake_token_around_image>",
    "image_token": "<image>",
    "global_image_token": "<global-img>",
    "end_of_utterance_token": "<end_of_utterance>",
}
"""The tokens SmolVLA and SmolVLM's processor look up by attribute name."""

VOCABULARY = (  # noqa: SIM905 (a sentence of words reads better than thirty quoted ones)
    "pick place put move lift grasp release the a an and it up down in on into to of from "
    "cube block box zone target left right red green blue"
).split()
"""Words the tokenizer knows besides the env's instruction; any other word is ``<unk>``."""


@dataclass(frozen=True)
class Backbone:
    """A SmolVLM backbone's shape, and what SmolVLA keeps of it."""

    text_hidden: int
    text_intermediate: int
    text_layers: int
    text_heads: int
    text_kv_heads: int
    head_dim: int
    vocab_size: int | None
    """None: the local tokenizer's own size."""
    vision_hidden: int
    vision_intermediate: int
    vision_layers: int
    vision_heads: int
    image_size: int
    patch_size: int
    scale_factor: int
    vlm_layers: int
    """SmolVLA keeps the backbone's first ``vlm_layers`` text layers; its action expert has as many."""
    flow_steps: int

    @property
    def image_seq_len(self) -> int:
        """Image tokens per camera after SmolVLM's pixel shuffle."""
        return (self.image_size // self.patch_size) ** 2 // self.scale_factor**2


SIZES = {
    "tiny": Backbone(64, 128, 2, 4, 2, 16, None, 32, 64, 1, 2, 64, 16, 2, 2, flow_steps=3),
    # SmolVLM2-500M-Video-Instruct's shapes; SmolVLA keeps 16 of its 32 text layers.
    "full": Backbone(960, 2560, 32, 15, 5, 64, 49280, 768, 3072, 12, 12, 512, 16, 4, 16, flow_steps=10),
}


def write_backbone(out: Path, shape: Backbone, instruction: str) -> Path:
    """A SmolVLM config, tokenizer and processor in ``out``, as the hub's snapshot lays them out."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (
        PreTrainedTokenizerFast,
        SmolVLMConfig,
        SmolVLMImageProcessor,
        SmolVLMProcessor,
        SmolVLMVideoProcessor,
    )

    words = re.findall(r"\w+", instruction.lower())
    tokens = [*SPECIAL_TOKENS.values(), *IMAGE_TOKENS.values(), *VOCABULARY, *words]
    vocab = {token: i for i, token in enumerate(dict.fromkeys(tokens))}
    word_level = Tokenizer(models.WordLevel(vocab, unk_token=SPECIAL_TOKENS["unk_token"]))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=word_level, model_max_length=512, extra_special_tokens=IMAGE_TOKENS, **SPECIAL_TOKENS
    )
    config = SmolVLMConfig(
        text_config={
            "model_type": "llama",
            "vocab_size": shape.vocab_size or len(vocab),
            "hidden_size": shape.text_hidden,
            "intermediate_size": shape.text_intermediate,
            "num_hidden_layers": shape.text_layers,
            "num_attention_heads": shape.text_heads,
            "num_key_value_heads": shape.text_kv_heads,
            "head_dim": shape.head_dim,
            "max_position_embeddings": 8192,
            "rms_norm_eps": 1e-5,
            "pad_token_id": vocab[SPECIAL_TOKENS["pad_token"]],
        },
        vision_config={
            "hidden_size": shape.vision_hidden,
            "intermediate_size": shape.vision_intermediate,
            "num_hidden_layers": shape.vision_layers,
            "num_attention_heads": shape.vision_heads,
            "image_size": shape.image_size,
            "patch_size": shape.patch_size,
        },
        scale_factor=shape.scale_factor,
        image_token_id=vocab[IMAGE_TOKENS["image_token"]],
        pad_token_id=vocab[SPECIAL_TOKENS["pad_token"]],
    )
    size = {"longest_edge": shape.image_size}
    processor = SmolVLMProcessor(
        image_processor=SmolVLMImageProcessor(size=size, max_image_size=size, do_image_splitting=False),
        tokenizer=tokenizer,
        video_processor=SmolVLMVideoProcessor(),
        image_seq_len=shape.image_seq_len,
    )
    out.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def dataset_stats(spec: EnvSpec) -> dict[str, dict[str, torch.Tensor]]:
    """Normalisation before any data: actions mapped from the env's bounds to [-1, 1], the state
    as it comes. Pretraining on a dataset replaces them with the dataset's own statistics."""
    low, high = torch.tensor(spec.action_low), torch.tensor(spec.action_high)
    if not (torch.isfinite(low).all() and torch.isfinite(high).all()):
        raise ValueError(f"env {spec.name!r} has unbounded actions: no normalisation to start from")
    dim = len(spec.state_names)
    return {
        keys.ACTION: {"mean": (low + high) / 2, "std": ((high - low) / 2).clamp_min(1e-6)},
        keys.STATE: {"mean": torch.zeros(dim), "std": torch.ones(dim)},
    }


def init_smolvla(out: Path, size: str, spec: EnvSpec, horizon: int, seed: int = 0) -> Path:
    """A random-weight SmolVLA for an env of ``spec``, saved to ``out`` (see the module doc)."""
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.factory import make_pre_post_processors
    from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy

    from robotrl.policy.lerobot import LerobotChunkPolicy, enable_rtc

    if not spec.camera_shapes:
        raise ValueError(f"env {spec.name!r} has no camera: a VLA reads images (set env.cameras)")
    shape = SIZES[size]
    backbone = write_backbone(out / VLM_FOLDER, shape, spec.instruction)
    state_dim, action_dim = len(spec.state_names), len(spec.action_names)
    inputs = {keys.STATE: PolicyFeature(FeatureType.STATE, (state_dim,))}
    for cam, (h, w, c) in spec.camera_shapes.items():
        inputs[keys.IMAGE_PREFIX + cam] = PolicyFeature(FeatureType.VISUAL, (c, h, w))
    config = SmolVLAConfig(
        vlm_model_name=str(backbone.resolve()),
        load_vlm_weights=False,
        num_vlm_layers=shape.vlm_layers,
        chunk_size=horizon,
        n_action_steps=horizon,
        num_steps=shape.flow_steps,
        resize_imgs_with_padding=(shape.image_size, shape.image_size),
        max_state_dim=max(32, state_dim),
        max_action_dim=max(32, action_dim),
        input_features=inputs,
        output_features={keys.ACTION: PolicyFeature(FeatureType.ACTION, (action_dim,))},
        device="cpu",
    )
    enable_rtc(SmolVLAPolicy, config)
    torch.manual_seed(seed)
    policy = SmolVLAPolicy(config)
    pre, post = make_pre_post_processors(config, dataset_stats=dataset_stats(spec))
    # lerobot's files, robotrl's metadata; the backbone is already in place as vlm/
    LerobotChunkPolicy(policy, pre, post, spec).save(out)
    return out


def local_backbone(folder: Path, config: Any) -> Path | None:
    """The backbone folder a VLA folder's config names relative to it, made absolute; None when
    the config names a hub id (resolved from the Hugging Face cache) or has no backbone."""
    name = getattr(config, "vlm_model_name", None)
    if not isinstance(name, str) or Path(name).is_absolute():
        return None
    candidate = folder / name
    return candidate.resolve() if candidate.is_dir() else None


def parameter_count(folder: Path) -> tuple[int, int]:
    """(total, trainable) parameters of the VLA saved in ``folder``."""
    from robotrl.policy.lerobot import LerobotChunkPolicy

    policy = LerobotChunkPolicy.load(folder)
    params = list(policy.policy.parameters())
    return sum(p.numel() for p in params), sum(p.numel() for p in params if p.requires_grad)


def main(argv: Sequence[str]) -> int:
    """``robotrl vla init --type smolvla --size tiny|full --out DIR [env overrides]``."""
    parser = argparse.ArgumentParser(
        prog="robotrl vla",
        description="Make a real VLA offline with random weights, for the env the overrides name.",
        epilog="Example: robotrl vla init --size tiny --out runs/smolvla_tiny env.cameras=[front,wrist] "
        "env.privileged_state=false",
    )
    parser.add_argument("command", choices=["init"])
    parser.add_argument("--type", choices=["smolvla"], default="smolvla")
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args, overrides = parser.parse_known_args(list(argv))
    from robotrl.config.load import ConfigError, load_config
    from robotrl.sim import make_env

    try:
        cfg = load_config(overrides)
    except ConfigError as exc:
        print(f"robotrl vla: {exc}", file=sys.stderr)
        return 2
    if args.out.exists() and any(args.out.iterdir()):
        print(f"robotrl vla: --out {args.out} exists and is not empty; choose a new folder", file=sys.stderr)
        return 2
    env = make_env(cfg.env)
    spec = env.spec
    env.close()
    start = time.perf_counter()
    try:
        init_smolvla(args.out, args.size, spec, cfg.policy.horizon, args.seed)
    except ValueError as exc:
        print(f"robotrl vla: {exc}", file=sys.stderr)
        return 2
    total, trainable = parameter_count(args.out)
    print(
        f"robotrl vla: {args.size} {args.type} for {spec.name} "
        f"(cameras {sorted(spec.camera_shapes)}, state {len(spec.state_names)}, action "
        f"{len(spec.action_names)}, horizon {cfg.policy.horizon}) in {args.out}: {total:,} parameters, "
        f"{trainable:,} trainable, made in {time.perf_counter() - start:.1f} s. "
        f"Run it with policy=lerobot policy.path={args.out}"
    )
    return 0
