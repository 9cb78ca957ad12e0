"""Real VLAs (lerobot's SmolVLA and pi0.5, tiny) made offline by `robotrl vla init` and run by robotrl."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from robotrl.config.policy import PolicyConfig, PolicyKind
from robotrl.core import keys
from robotrl.core.types import EnvSpec, Observation
from robotrl.policy import build_policy
from robotrl.policy.checkpoint import META_FILE
from robotrl.policy.lerobot import LerobotChunkPolicy
from robotrl.policy.vla import MAKERS, PI05_TOKENIZER, VLM_FOLDER

pytestmark = pytest.mark.usefixtures("one_torch_thread")

H, A, S, IMG = 16, 6, 9, 32
HUB_ID = "HuggingFaceTB/SmolVLM2-500M-Video-Instruct"


def spec() -> EnvSpec:
    return EnvSpec(
        "vla-test",
        tuple(f"j{i}" for i in range(A)),
        (-100.0,) * A,
        (100.0,) * A,
        tuple(f"s{i}" for i in range(S)),
        {"front": (IMG, IMG, 3), "wrist": (IMG, IMG, 3)},
        instruction="pick the cube and place it in the zone",
    )


def observation(seed: int = 0) -> Observation:
    rng = np.random.default_rng(seed)
    images = {c: rng.integers(0, 256, (IMG, IMG, 3), dtype=np.uint8) for c in ("front", "wrist")}
    return Observation(0, rng.standard_normal(S).astype(np.float32), images, "pick the cube")


@pytest.fixture(scope="module", params=sorted(MAKERS))
def vla_dir(request, tmp_path_factory) -> Path:
    made: Path = MAKERS[request.param](tmp_path_factory.mktemp("vla") / request.param, "tiny", spec(), H)
    return made


def load(path: Path) -> LerobotChunkPolicy:
    policy = build_policy(PolicyConfig(kind=PolicyKind.lerobot, path=str(path), horizon=H), spec())
    assert isinstance(policy, LerobotChunkPolicy)
    return policy


def chunk(policy: LerobotChunkPolicy, prefix: np.ndarray | None, delay: int) -> np.ndarray:
    torch.manual_seed(0)  # the flow's noise
    return policy.infer(observation(), prefix, delay)


def test_a_tiny_vla_is_lerobots_own_class_and_runs_rtc_with_an_exact_prefix(vla_dir):
    from lerobot.policies.pi05.modeling_pi05 import PI05Policy
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy

    policy = load(vla_dir)
    assert type(policy.policy) is {"smolvla": SmolVLAPolicy, "pi05": PI05Policy}[vla_dir.name]
    assert policy.uses_rtc and policy.horizon == H and policy.action_dim == A
    free = chunk(policy, None, 0)
    prefix = np.linspace(-50, 50, 4 * A, dtype=np.float32).reshape(4, A)
    guided = chunk(policy, prefix, 4)
    assert free.shape == guided.shape == (H, A) and np.isfinite(guided).all()
    assert np.array_equal(guided[:4], prefix)
    assert not np.allclose(guided[4:], free[4:])  # RTC's guidance reached the continuation
    preprocessor = json.loads((vla_dir / "policy_preprocessor.json").read_text())
    tokenizers = [
        s["config"]["tokenizer_name"] for s in preprocessor["steps"] if "tokenizer_name" in s["config"]
    ]
    assert tokenizers == [VLM_FOLDER] and (vla_dir / META_FILE).is_file()


def test_a_vla_update_trains_and_ships_only_the_action_expert(vla_dir):
    policy = load(vla_dir)
    trainable = policy.trainable_tensors()
    total = sum(p.numel() for p in policy.policy.parameters())
    assert 0 < sum(t.size for t in trainable.values()) < 0.6 * total  # a quarter at full size: the bench
    vlm = ("vlm_with_expert.vlm.", "paligemma_with_expert.paligemma.")
    assert not any(part in name for name in trainable for part in vlm)  # the VLM stays frozen
    batch = training_batch(policy)
    optimizer = torch.optim.SGD([p for p in policy.policy.parameters() if p.requires_grad], lr=0.1)
    before = {name: p.detach().clone() for name, p in policy.policy.named_parameters()}
    policy.train()
    policy.per_sample_loss(batch).mean().backward()
    optimizer.step()
    after = dict(policy.policy.named_parameters())
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    assert changed and changed <= set(trainable)
    assert len(changed) > len(trainable) // 2  # the loss reaches most of what is shipped


def test_lora_trains_adapters_on_the_vlm_and_the_folder_saves_them_merged(vla_dir, tmp_path):
    lora = PolicyConfig(kind=PolicyKind.lerobot, path=str(vla_dir), horizon=H, lora_rank=4)
    policy = LerobotChunkPolicy.load(vla_dir, spec(), lora)
    trainable = policy.trainable_tensors()
    assert trainable and all(".lora_" in name for name in trainable)  # every base weight frozen
    vlm = ("vlm_with_expert.vlm.", "paligemma.model.language_model.")
    assert any(part in name for name in trainable for part in vlm)  # adapters on the VLM itself
    optimizer = torch.optim.SGD([p for p in policy.policy.parameters() if p.requires_grad], lr=0.5)
    policy.train()
    policy.per_sample_loss(training_batch(policy)).mean().backward()
    optimizer.step()
    policy.eval()
    adapted = chunk(policy, None, 0)
    assert not np.allclose(adapted, chunk(load(vla_dir), None, 0))  # the adapters moved the policy
    policy.save(tmp_path / "merged")
    np.testing.assert_allclose(chunk(load(tmp_path / "merged"), None, 0), adapted, atol=1e-3)
    again = LerobotChunkPolicy.load(tmp_path / "merged", spec(), lora)  # fresh adapters on the merge
    assert set(again.trainable_tensors()) == set(trainable)


def training_batch(policy: LerobotChunkPolicy, b: int = 2) -> dict[str, object]:
    rng = torch.Generator().manual_seed(0)
    batch: dict[str, object] = {
        keys.STATE: torch.randn(b, S, generator=rng),
        keys.ACTION: torch.randn(b, H, A, generator=rng),
        keys.PREFIX_LEN: torch.tensor([0, 3]),
        keys.ACTION_MASK: torch.ones(b, H, dtype=torch.bool),
        keys.TASK: ["pick the cube"] * b,
    }
    for cam in ("front", "wrist"):
        batch[keys.IMAGE_PREFIX + cam] = torch.randint(
            0, 256, (b, IMG, IMG, 3), dtype=torch.uint8, generator=rng
        )
    return batch


def test_the_folder_loads_after_being_moved(vla_dir, tmp_path):
    before = chunk(load(vla_dir), None, 0)
    moved = tmp_path / "elsewhere" / "policy"
    shutil.copytree(vla_dir, moved)
    shutil.move(moved.parent, tmp_path / "renamed")
    after = chunk(load(tmp_path / "renamed" / "policy"), None, 0)
    np.testing.assert_array_equal(before, after)


def test_vla_init_refuses_an_env_without_cameras(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "robotrl.cli", "vla", "init", "--out", str(tmp_path / "v"), "env.cameras=[]"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2 and "has no camera" in out.stderr, out.stdout + out.stderr


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_vla_init_then_a_hub_layout_folder_runs_in_robotrl_eval_offline(tmp_path, kind):
    """What a user does: `robotrl vla init` for the env, then the same policy laid out as the hub's
    `lerobot/smolvla_base` or `lerobot/pi05_base` snapshot (the tokenizer, and SmolVLA's backbone,
    named by hub id and found in a Hugging Face cache, offline) runs through `robotrl eval`'s actor,
    RTC and all. SmolVLA's folder has no robotrl metadata left; a tiny pi0.5 keeps the metadata
    that names its shrunk tables (a hub pi0.5 has lerobot's own)."""
    env_args = ["env=so101_pick_place", "env.cameras=[front,wrist]", f"env.image_size={IMG}"]
    made = tmp_path / "made"
    cli(
        tmp_path,
        "vla",
        "init",
        "--type",
        kind,
        "--size",
        "tiny",
        "--out",
        str(made),
        f"policy.horizon={H}",
        *env_args,
    )
    hub_id = {"smolvla": HUB_ID, "pi05": PI05_TOKENIZER}[kind]
    snapshot = tmp_path / f"{kind}_base"
    dropped = (VLM_FOLDER, META_FILE) if kind == "smolvla" else (VLM_FOLDER,)
    shutil.copytree(made, snapshot, ignore=shutil.ignore_patterns(*dropped))
    for name in ("config.json", "policy_preprocessor.json"):
        text = (snapshot / name).read_text()
        (snapshot / name).write_text(text.replace(f'"{VLM_FOLDER}"', f'"{hub_id}"'))
    repo = tmp_path / "hf" / "hub" / ("models--" + hub_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    shutil.copytree(made / VLM_FOLDER, repo / "snapshots" / ("0" * 40))
    out = cli(
        tmp_path,
        "eval",
        "policy=lerobot",
        f"policy.path={snapshot}",
        f"policy.horizon={H}",
        *env_args,
        "actor.episodes=1",
        "env.max_episode_ticks=40",
        hf_home=tmp_path / "hf",
    )
    summary = json.loads((tmp_path / "runs" / "default" / "eval_summary.json").read_text())
    assert summary["episodes"] == 1, out


def cli(cwd: Path, *args: str, hf_home: Path | None = None) -> str:
    """`robotrl ARGS` in ``cwd`` with no hub (and ``hf_home`` as the Hugging Face cache); its stdout."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if hf_home is not None:
        env["HF_HOME"] = str(hf_home)
    out = subprocess.run(
        [sys.executable, "-m", "robotrl.cli", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=cwd,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    return out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_the_vla_bench_measures_every_figure_of_a_size(kind):
    from robotrl.bench.vla import measure

    figures = measure(kind, "tiny", chunks=3, swaps=2, updates=2)
    assert figures["swaps"] == 2 and 0 < figures["trainable"] < figures["params"]
    assert 0 < figures["update_share"] < 1 and figures["updates_per_s"] > 0
    assert 0 < figures["installed_ms_p50"] < figures["first_chunk_ms_p50"]
