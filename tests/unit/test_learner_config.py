"""The learner's config fields: presets compose, bad values fail naming the field."""

from __future__ import annotations

import pytest

from robotrl.config.learner import AlgorithmKind
from robotrl.config.load import ConfigError, load_config


def test_learner_presets_compose():
    assert load_config(["learner=bc"]).learner.algorithm is AlgorithmKind.bc
    cfg = load_config(["learner=rapi", "learner.max_policy_lag=3", "learner.rapi.critic_images=false"])
    assert cfg.learner.max_policy_lag == 3 and not cfg.learner.rapi.critic_images


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("learner.rapi.target_tau=0", "learner.rapi.target_tau"),
        ("learner.rapi.target_tau=1.5", "learner.rapi.target_tau"),
        ("learner.grad_clip=0", "learner.grad_clip"),
        ("learner.learning_starts=-1", "learner.learning_starts"),
        ("learner.max_groups=-1", "learner.max_groups"),
        ("learner.rapi.critic_hidden=0", "learner.rapi.critic_hidden"),
        ("learner.log_every_groups=0", "learner.log_every_groups"),
        ("learner.fastest_successes=-2", "learner.fastest_successes"),
        ("learner.online_capacity=50", "learner.online_capacity"),
        ("learner.anchor_capacity=10", "learner.anchor_capacity"),
        ("learner.demos_path=''", "learner.demos_path"),
        ("learner.torch_threads=-1", "learner.torch_threads"),
        ("learner.prefetch_batches=-1", "learner.prefetch_batches"),
        ("learner.max_samples_per_insert=0", "learner.max_samples_per_insert"),
        ("learner.policy_lr=0", "learner.policy_lr"),
        ("learner.policy_lr_end=1.5", "learner.policy_lr_end"),
        ("learner.policy_lr_end=-0.1", "learner.policy_lr_end"),
    ],
)
def test_bad_learner_values_fail_naming_the_field(override, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config([override])
