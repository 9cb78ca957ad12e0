"""`robotrl vla init`: a real VLA (lerobot's own SmolVLA or pi0.5) made offline, with random weights.

No hub is reachable here, so the folder holds everything lerobot would fetch: the policy's
``save_pretrained`` files and processors, and, in ``vlm/``, a tokenizer made locally with the
``tokenizers`` library (word-level, with the special tokens the processors read by name) and
the backbone's config: SmolVLM-style for SmolVLA, which builds its backbone from it
(``load_vlm_weights=False``), PaliGemma for pi0.5, which builds its PaliGemma and Gemma expert
from code. Every tensor is random: the architecture is the true one, the knowledge is not.

``tiny`` trains on 2 CPU cores; ``full`` has the published shapes: SmolVLA's
SmolVLM2-500M-sized backbone cut to 16 layers (about 450M parameters), and pi0.5 with
lerobot's smallest working table (a ``gemma_2b`` PaliGemma and a ``gemma_300m`` expert, in
bfloat16, as float32 would not leave room to load it in 24 GiB). lerobot's pi0.5 takes its
Gemma and SigLIP shapes from fixed tables, so a tiny pi0.5 is lerobot's own class built while
:func:`tiny_pi05` shrinks those tables; the folder's metadata says so and the loader shrinks
them again (lerobot alone cannot load a tiny pi0.5 folder; it can load every other).

The folder is relocatable: its config and tokenizer step name ``vlm``, which
:class:`~robotrl.policy.lerobot.LerobotChunkPolicy` re-points to the folder it loads from.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import re
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
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


def word_tokenizer(instruction: str, extra_words: Sequence[str] = (), **extra_special: str) -> Any:
    """A word-level fast tokenizer knowing ``VOCABULARY``, the instruction's words and
    ``extra_words``, with ``SPECIAL_TOKENS`` and the ``extra_special`` tokens a processor reads
    by attribute name."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = re.findall(r"\w+", instruction.lower())
    tokens = [*SPECIAL_TOKENS.values(), *extra_special.values(), *VOCABULARY, *words, *extra_words]
    vocab = {token: i for i, token in enumerate(dict.fromkeys(tokens))}
    word_level = Tokenizer(models.WordLevel(vocab, unk_token=SPECIAL_TOKENS["unk_token"]))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=word_level,
        model_max_length=512,
        extra_special_tokens=extra_special or None,
        **SPECIAL_TOKENS,
    )


def write_backbone(out: Path, shape: Backbone, instruction: str) -> Path:
    """A SmolVLM config, tokenizer and processor in ``out``, as the hub's snapshot lays them out."""
    from transformers import (
        SmolVLMConfig,
        SmolVLMImageProcessor,
        SmolVLMProcessor,
        SmolVLMVideoProcessor,
    )

    tokenizer = word_tokenizer(instruction, **IMAGE_TOKENS)
    vocab = tokenizer.get_vocab()
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
    as it comes, in every mode lerobot's normaliser has. Pretraining on a dataset replaces them
    with the dataset's own statistics."""
    low, high = torch.tensor(spec.action_low), torch.tensor(spec.action_high)
    if not (torch.isfinite(low).all() and torch.isfinite(high).all()):
        raise ValueError(f"env {spec.name!r} has unbounded actions: no normalisation to start from")
    ones = torch.ones(len(spec.state_names))
    action = {"mean": (low + high) / 2, "std": ((high - low) / 2).clamp_min(1e-6), "min": low, "max": high}
    state = {"mean": 0 * ones, "std": ones, "min": -ones, "max": ones}
    return {
        keys.ACTION: {**action, "q01": low, "q99": high},
        keys.STATE: {**state, "q01": -ones, "q99": ones},
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


@dataclass(frozen=True)
class Gemma:
    """One row of lerobot's Gemma table (``modeling_pi05.get_gemma_config``)."""

    width: int
    depth: int
    mlp_dim: int
    num_heads: int
    num_kv_heads: int
    head_dim: int


TINY_GEMMA = {"gemma_2b": Gemma(64, 2, 128, 8, 1, 8), "gemma_300m": Gemma(32, 2, 64, 8, 1, 8)}
"""The tiny pi0.5's table: its PaliGemma (``gemma_2b``) and its action expert (``gemma_300m``),
both with 8 heads of one shape, as lerobot's joint attention assumes."""
TINY_SIGLIP = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}
"""The tiny pi0.5's vision tower (lerobot fixes SigLIP-So400m's shapes)."""


@dataclass(frozen=True)
class Pi05Size:
    image_size: int
    flow_steps: int
    prompt_tokens: int
    dtype: str


PI05_SIZES = {
    "tiny": Pi05Size(image_size=64, flow_steps=3, prompt_tokens=48, dtype="float32"),
    "full": Pi05Size(image_size=224, flow_steps=10, prompt_tokens=200, dtype="bfloat16"),
}
PI05_TOKENIZER = "google/paligemma-3b-pt-224"
"""The tokenizer id lerobot's pi0.5 processor names; a local tokenizer stands in for it."""
PI05_PROMPT_WORDS = ("task", "Task", "State", "Action", ":", ",", ";", *map(str, range(256)))
"""What pi0.5's prompt adds to the instruction: ``Task: ..., State: <256 bins>;\nAction: ``."""
TABLES_KEY = "lerobot_tables"
"""Metadata key naming the shrunk tables a folder was built with (``tiny_pi05``), if any."""


@contextlib.contextmanager
def tiny_pi05() -> Iterator[None]:
    """While open, lerobot's pi0.5 builds with ``TINY_GEMMA`` and ``TINY_SIGLIP`` in place of
    its fixed tables (its image projection follows the PaliGemma's width, as in the full model)."""
    from lerobot.policies.pi05 import modeling_pi05 as pi05

    table, paligemma = pi05.get_gemma_config, pi05.PaliGemmaForConditionalGenerationWithPiGemma

    def tiny_table(variant: str) -> Any:
        return pi05.GemmaConfig(**asdict(TINY_GEMMA[variant]))

    def tiny_paligemma(config: Any) -> Any:
        width = config.text_config.hidden_size
        for name, value in {**TINY_SIGLIP, "projection_dim": width}.items():
            setattr(config.vision_config, name, value)
        config.projection_dim = width
        return paligemma(config=config)

    pi05.get_gemma_config, pi05.PaliGemmaForConditionalGenerationWithPiGemma = tiny_table, tiny_paligemma
    try:
        yield
    finally:
        pi05.get_gemma_config, pi05.PaliGemmaForConditionalGenerationWithPiGemma = table, paligemma


def building(meta: dict[str, Any]) -> contextlib.AbstractContextManager[None]:
    """The context a folder with robotrl metadata ``meta`` must be built in."""
    return tiny_pi05() if meta.get(TABLES_KEY) == "tiny_pi05" else contextlib.nullcontext()


@contextlib.contextmanager
def _tokenizer_at(hub_id: str, local: Path) -> Iterator[None]:
    """While open, lerobot's tokenizer step loads ``hub_id`` from ``local`` (init only: no hub here;
    a saved folder names ``local`` itself, so loading needs no such help)."""
    from lerobot.processor import tokenizer_processor

    auto = tokenizer_processor.AutoTokenizer

    class LocalAutoTokenizer:
        @staticmethod
        def from_pretrained(name: str, *args: Any, **kwargs: Any) -> Any:
            return auto.from_pretrained(str(local) if name == hub_id else name, *args, **kwargs)

    tokenizer_processor.AutoTokenizer = LocalAutoTokenizer
    try:
        yield
    finally:
        tokenizer_processor.AutoTokenizer = auto


def init_pi05(out: Path, size: str, spec: EnvSpec, horizon: int, seed: int = 0) -> Path:
    """A random-weight pi0.5 for an env of ``spec``, saved to ``out`` (see the module doc)."""
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.factory import make_pre_post_processors
    from lerobot.policies.pi05.configuration_pi05 import PI05Config
    from lerobot.policies.pi05.modeling_pi05 import PI05Policy

    from robotrl.policy.lerobot import LerobotChunkPolicy, enable_rtc

    if not spec.camera_shapes:
        raise ValueError(f"env {spec.name!r} has no camera: a VLA reads images (set env.cameras)")
    shape = PI05_SIZES[size]
    tokenizer_dir = out / VLM_FOLDER
    word_tokenizer(spec.instruction, PI05_PROMPT_WORDS).save_pretrained(tokenizer_dir)
    state_dim, action_dim = len(spec.state_names), len(spec.action_names)
    inputs = {keys.STATE: PolicyFeature(FeatureType.STATE, (state_dim,))}
    for cam, (h, w, c) in spec.camera_shapes.items():
        inputs[keys.IMAGE_PREFIX + cam] = PolicyFeature(FeatureType.VISUAL, (c, h, w))
    config = PI05Config(
        dtype=shape.dtype,
        chunk_size=horizon,
        n_action_steps=horizon,
        num_inference_steps=shape.flow_steps,
        image_resolution=(shape.image_size, shape.image_size),
        tokenizer_max_length=shape.prompt_tokens,
        max_state_dim=max(32, state_dim),
        max_action_dim=max(32, action_dim),
        input_features=inputs,
        output_features={keys.ACTION: PolicyFeature(FeatureType.ACTION, (action_dim,))},
        freeze_vision_encoder=True,
        train_expert_only=True,
        device="cpu",
    )
    enable_rtc(PI05Policy, config)
    tables = "tiny_pi05" if size == "tiny" else None
    torch.manual_seed(seed)
    with building({TABLES_KEY: tables}):
        policy = PI05Policy(config)
    # the PaliGemma's config beside its tokenizer, as the hub's snapshot of the tokenizer id has it
    policy.model.paligemma_with_expert.paligemma.config.save_pretrained(tokenizer_dir)
    with _tokenizer_at(PI05_TOKENIZER, tokenizer_dir):
        pre, post = make_pre_post_processors(config, dataset_stats=dataset_stats(spec))
    for step in pre.steps:
        if getattr(step, "tokenizer_name", None) == PI05_TOKENIZER:
            step.tokenizer_name = str(tokenizer_dir.resolve())
    LerobotChunkPolicy(policy, pre, post, spec, tables=tables).save(out)
    return out


def local_backbone(folder: Path, config: Any) -> Path | None:
    """The folder's own backbone folder (``vlm/``: SmolVLA's backbone config and tokenizer, pi0.5's
    tokenizer), made absolute; None when the config names a hub id (resolved from the Hugging Face
    cache) or the folder has none."""
    name = getattr(config, "vlm_model_name", VLM_FOLDER)
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


MAKERS = {"smolvla": init_smolvla, "pi05": init_pi05}


def main(argv: Sequence[str]) -> int:
    """``robotrl vla init --type smolvla|pi05 --size tiny|full --out DIR [env overrides]``."""
    parser = argparse.ArgumentParser(
        prog="robotrl vla",
        description="Make a real VLA offline with random weights, for the env the overrides name.",
        epilog="Example: robotrl vla init --size tiny --out runs/smolvla_tiny env.cameras=[front,wrist] "
        "env.privileged_state=false",
    )
    parser.add_argument("command", choices=["init"])
    parser.add_argument("--type", choices=sorted(MAKERS), default="smolvla")
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
        MAKERS[args.type](args.out, args.size, spec, cfg.policy.horizon, args.seed)
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
