"""The hooks RecordingGRPOTrainer adds to TRL's GRPOTrainer, on a real trainer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from sandbox.api import RewardSandbox
from workers.training.grpo import TrainingSpec, build_trainer
from workers.training.reward_dispatch import RewardDispatcher


def test_set_sampling_retunes_generation_and_the_loss_log_probs(
    make_spec: Callable[..., TrainingSpec], make_sandbox: Callable[[], RewardSandbox]
) -> None:
    spec = make_spec(train_steps=1)
    trainer = build_trainer(
        spec, RewardDispatcher(make_sandbox(), spec.reward_config, spec.dataset)
    )
    model: Any = trainer.model.get_base_model()  # type: ignore[union-attr, operator]
    ids = torch.tensor([[1, 40, 50, 60, 70, 2]])

    def fused_log_probs() -> torch.Tensor:
        return model(input_ids=ids, labels=ids, fused_lm_head=True).log_probs

    def reference_log_probs(temperature: float) -> torch.Tensor:
        logits = model(input_ids=ids).logits[:, :-1] / temperature
        return torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None])[..., 0]

    with torch.no_grad():
        assert torch.allclose(fused_log_probs(), reference_log_probs(1.0), atol=1e-5)
        trainer.set_sampling(temperature=0.5, top_p=0.9)
        assert torch.allclose(fused_log_probs(), reference_log_probs(0.5), atol=1e-5)
        trainer.set_sampling(temperature=None, top_p=0.8)
        assert torch.allclose(fused_log_probs(), reference_log_probs(0.5), atol=1e-5)

    assert trainer.temperature == pytest.approx(0.5)
    assert trainer.generation_config.temperature == pytest.approx(0.5)
    assert trainer.generation_config.top_p == pytest.approx(0.8)
    assert trainer.generation_kwargs["temperature"] == pytest.approx(0.5)
    assert trainer.generation_kwargs["top_p"] == pytest.approx(0.8)


def test_prompts_keep_their_last_max_prompt_length_tokens(
    make_spec: Callable[..., TrainingSpec], make_sandbox: Callable[[], RewardSandbox]
) -> None:
    spec = make_spec(train_steps=1, max_prompt_length=4)
    trainer = build_trainer(
        spec, RewardDispatcher(make_sandbox(), spec.reward_config, spec.dataset)
    )
    prompt = "Write a long story about a banana and a papaya:"
    tokenizer: Any = trainer.processing_class
    full = tokenizer(text=[prompt])["input_ids"][0]

    prompt_ids, _, _ = trainer._tokenize_prompts([prompt, "Hi"])

    assert len(full) > 4
    assert prompt_ids[0] == list(full[-4:])
    assert len(prompt_ids[1]) <= 4
