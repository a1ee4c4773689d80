"""Hyperparameter defaults, presets and the combinations they refuse."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from service.jobs.hyperparameters import AUTO_MICRO_BATCH_TOKENS, Hyperparameters
from tests.tiny import TINY_HYPERPARAMETERS


def test_defaults_are_for_real_models() -> None:
    hp = Hyperparameters()
    assert hp.learning_rate == 1e-5 and hp.max_completion_length == 512
    assert (hp.num_generations, hp.prompts_per_step) == (8, 4)
    assert (hp.lr_scheduler_type, hp.warmup_ratio, hp.max_grad_norm) == ("cosine", 0.03, 1.0)
    assert (hp.epsilon, hp.epsilon_high, hp.scale_rewards) == (0.2, 0.28, "group")
    # 32 completions of 512 tokens: two backward passes of 16 (8192 completion tokens each).
    assert hp.micro_batch_size == AUTO_MICRO_BATCH_TOKENS // 512 == 16
    assert hp.gradient_accumulation_steps == 2


def test_the_tiny_cpu_preset_is_the_tiny_models_settings() -> None:
    preset = Hyperparameters(preset="tiny-cpu").model_dump()
    explicit = Hyperparameters(**TINY_HYPERPARAMETERS).model_dump()
    assert {**preset, "preset": None} == explicit
    assert preset["micro_batch_size"] == 16  # a tiny step is one micro-batch


def test_fields_set_win_over_the_preset_and_resolved_values_round_trip() -> None:
    hp = Hyperparameters(preset="medium", learning_rate=3e-5, prompts_per_step=2)
    assert (hp.learning_rate, hp.micro_batch_size, hp.gradient_accumulation_steps) == (3e-5, 4, 4)
    stored = hp.model_dump(mode="json")
    assert Hyperparameters.model_validate(stored).model_dump(mode="json") == stored


def test_a_constant_schedule_alone_means_no_warmup() -> None:
    assert Hyperparameters(lr_scheduler_type="constant").warmup_ratio == 0.0


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"epsilon": 0.3, "epsilon_high": 0.2}, "epsilon_high (0.2) must be at least epsilon"),
        ({"micro_batch_size": 5}, "micro_batch_size (5) must divide the completions of a step"),
        ({"lr_scheduler_type": "constant", "warmup_ratio": 0.1}, "use 'constant_with_warmup'"),
        ({"stop": ["</answer>", "</answer>"]}, "the same string is given twice"),
        ({"stop": [""]}, "an empty string"),
        ({"stop": ["x" * 65]}, "longer than 64 characters"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "at most 4 items"),
        ({"preset": "huge"}, "'tiny-cpu', 'small' or 'medium'"),
    ],
)
def test_bad_combinations_say_what_to_change(values: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        Hyperparameters.model_validate(values)


def test_jobs_stored_before_the_real_model_defaults_keep_their_settings() -> None:
    stored = {"train_steps": 5, "learning_rate": 2e-2, "prompts_per_step": 2, "num_generations": 8}
    old = Hyperparameters.from_stored(stored)
    assert (old.lr_scheduler_type, old.warmup_ratio, old.epsilon_high) == ("constant", 0.0, 0.2)
    assert old.micro_batch_size == 16 and old.activation_checkpointing is False
    # Records written now carry "preset" (None included) and are read as they are.
    current = Hyperparameters(train_steps=5).model_dump(mode="json")
    assert Hyperparameters.from_stored(current).model_dump(mode="json") == current
