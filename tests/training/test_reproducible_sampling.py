"""Sampling keyed per completion (reproducible_sampling): the right distribution, and tokens that
depend on the completion's key only, not on the rank or the batch that generates it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from accelerate import Accelerator

from sandbox.api import RewardSandbox
from workers.training.generation import Generation, GenerationSetupError
from workers.training.grpo import TrainingSpec, build_trainer
from workers.training.reproducible_sampling import (
    KeyedGumbelSampling,
    keyed_gumbel,
    keyed_uniform,
    sampling_warpers,
)
from workers.training.reward_dispatch import RewardDispatcher

SAMPLES = 40_000
VOCAB = 64


def sample_tokens(
    logits: torch.Tensor, *, temperature: float = 1.0, top_p: float | None = None
) -> torch.Tensor:
    """One token for each of SAMPLES keys from the same logits, as greedy decoding picks it."""
    sampling = KeyedGumbelSampling(
        seed=3,
        step=5,
        sample_indices=torch.arange(SAMPLES),
        prompt_length=4,
        warpers=sampling_warpers(temperature=temperature, top_k=None, top_p=top_p, min_p=None),
    )
    input_ids = torch.zeros((SAMPLES, 6), dtype=torch.long)
    scores = sampling(input_ids, logits.expand(SAMPLES, -1).clone())  # type: ignore[arg-type]
    return scores.argmax(dim=-1)


def frequencies(tokens: torch.Tensor) -> torch.Tensor:
    return torch.bincount(tokens, minlength=VOCAB).double() / len(tokens)


def assert_matches(observed: torch.Tensor, expected: torch.Tensor) -> None:
    # 5 standard errors of a frequency: a wrong distribution (e.g. temperature ignored, or
    # noise shared between keys) is off by far more at this sample size.
    bound = 5 * (expected * (1 - expected) / SAMPLES).sqrt() + 1e-4
    assert ((observed - expected).abs() <= bound).all(), (observed - expected).abs().max()


def test_keyed_noise_samples_the_softmax_of_the_filtered_logits() -> None:
    logits = torch.randn(VOCAB, generator=torch.Generator().manual_seed(0)) * 2
    assert_matches(frequencies(sample_tokens(logits)), logits.double().softmax(-1))
    assert_matches(
        frequencies(sample_tokens(logits, temperature=0.5)), (logits.double() / 0.5).softmax(-1)
    )

    # top-p: only the smallest set of tokens holding 0.8 of the mass, renormalised.
    probabilities = logits.double().softmax(-1)
    ranked = probabilities.sort(descending=True)
    kept = ranked.indices[: int((ranked.values.cumsum(0) < 0.8).sum()) + 1]
    nucleus = torch.zeros(VOCAB, dtype=torch.float64)
    nucleus[kept] = probabilities[kept] / probabilities[kept].sum()
    tokens = sample_tokens(logits, top_p=0.8)
    assert set(tokens.unique().tolist()) <= set(kept.tolist())
    assert_matches(frequencies(tokens), nucleus)


def test_noise_is_uniform_and_independent_across_keys() -> None:
    uniform = keyed_uniform(
        seed=0, step=1, sample_indices=torch.arange(2048), position=0, vocab_size=512
    )
    assert float(uniform.min()) > 0 and float(uniform.max()) < 1
    assert float(uniform.mean()) == pytest.approx(0.5, abs=2e-3)
    assert float(uniform.var()) == pytest.approx(1 / 12, abs=1e-3)
    # Neighbouring vocabulary ids and neighbouring samples are uncorrelated.
    for first, second in ((uniform[:, :-1], uniform[:, 1:]), (uniform[:-1], uniform[1:])):
        pair = torch.stack([first.flatten(), second.flatten()])
        assert abs(float(torch.corrcoef(pair)[0, 1])) < 0.01


def test_noise_depends_on_every_key_field_and_on_nothing_else() -> None:
    key: dict[str, Any] = {"seed": 7, "step": 3, "position": 2, "vocab_size": VOCAB}
    batch = keyed_gumbel(sample_indices=torch.arange(8), **key)
    # A row's noise is its own: alone, or among other rows in another order, it is the same.
    alone = keyed_gumbel(sample_indices=torch.tensor([5]), **key)
    shuffled = keyed_gumbel(sample_indices=torch.tensor([6, 5, 2]), **key)
    assert torch.equal(alone[0], batch[5])
    assert torch.equal(shuffled, batch[[6, 5, 2]])
    # Each field of the key changes it: another seed, step, position, or sample.
    for field, value in (("seed", 8), ("step", 4), ("position", 3), ("seed", 7 + 2**32)):
        other = keyed_gumbel(sample_indices=torch.arange(8), **{**key, field: value})
        assert float((other == batch).float().mean()) < 0.01, field
    assert float((batch[0] == batch[1]).float().mean()) < 0.01


def rank_generation(
    trainer: Any, prompt_ids: list[list[int]], rank: int, monkeypatch: pytest.MonkeyPatch
) -> list[list[int]]:
    """What ``rank`` of a 2-rank job generates for its half of ``prompt_ids`` (rank order)."""
    half = len(prompt_ids) // 2
    with monkeypatch.context() as patch:
        patch.setattr(Accelerator, "process_index", property(lambda _: rank))
        completion_ids, _ = trainer._generate_single_turn(
            prompt_ids[rank * half : (rank + 1) * half], None, {}, 1
        )
    return list(completion_ids)


@pytest.mark.parametrize("reproducible", [True, False])
def test_a_completion_is_the_same_on_one_rank_as_on_either_of_two(
    make_spec: Callable[..., TrainingSpec],
    make_sandbox: Callable[[], RewardSandbox],
    monkeypatch: pytest.MonkeyPatch,
    reproducible: bool,
) -> None:
    spec = make_spec(train_steps=1, temperature=0.9, top_p=0.95, reproducible_sampling=reproducible)
    trainer: Any = build_trainer(
        spec, RewardDispatcher(make_sandbox(), spec.reward_config, spec.dataset)
    )
    # Prompts of different lengths, so each half is padded differently than the whole batch.
    prompts = ["Say a:"] * 3 + ["Write the letter b as often as you can:"] * 3
    prompt_ids, _, _ = trainer._tokenize_prompts(prompts)
    torch.manual_seed(0)
    whole, _ = trainer._generate_single_turn(prompt_ids, None, {}, 1)
    halves = [rank_generation(trainer, prompt_ids, rank, monkeypatch) for rank in (0, 1)]

    if reproducible:
        assert halves[0] + halves[1] == list(whole)
        # Sampled, not greedy: a group's completions differ from each other.
        assert len({tuple(ids) for ids in whole[:3]}) > 1
        # The next step draws new noise.
        trainer.state.global_step += 1
        later, _ = trainer._generate_single_turn(prompt_ids, None, {}, 1)
        assert list(later) != list(whole)
    else:
        # Each process's own random stream: the split changes what is sampled.
        assert halves[0] + halves[1] != list(whole)


def test_reproducible_sampling_is_refused_with_vllm(make_spec: Callable[..., TrainingSpec]) -> None:
    vllm = Generation(backend="vllm", device="cpu", mode="colocate", memory_fraction=0.1)
    spec = make_spec(reproducible_sampling=True)
    with pytest.raises(GenerationSetupError, match="RFT_GENERATION_BACKEND=transformers"):
        TrainingSpec(**{**spec.__dict__, "generation": vllm})
    # Without it, the same worker is fine.
    TrainingSpec(**{**make_spec().__dict__, "generation": vllm})
