"""Micro-batched backward passes and stop sequences, on real TRL training of the tiny model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sandbox.api import RewardSandbox
from workers.training.grpo import TrainingSpec, build_trainer, run_grpo
from workers.training.reward_dispatch import RewardDispatcher
from workers.training.step_records import StepRecord
from workers.training.stop_sequences import stop_length

from .harness import RecordingObserver

SpecFactory = Callable[..., TrainingSpec]
SandboxFactory = Callable[[], RewardSandbox]


def run_steps(
    make_spec: SpecFactory, make_sandbox: SandboxFactory, **hyperparameters: object
) -> list[StepRecord]:
    observer = RecordingObserver()
    run_grpo(make_spec(checkpoint_every=1000, **hyperparameters), make_sandbox(), observer)
    return observer.records


def test_micro_batches_record_the_same_steps_as_one_batch(
    make_spec: SpecFactory, make_sandbox: SandboxFactory
) -> None:
    # 2 prompts x 8 generations = 16 completions per step: one backward pass of 16, or 4 of 4.
    whole = run_steps(make_spec, make_sandbox, train_steps=3, micro_batch_size=16)
    # Activation checkpointing (what "auto" turns on with CUDA) recomputes the same values.
    split = run_steps(
        make_spec, make_sandbox, train_steps=3, micro_batch_size=4, activation_checkpointing=True
    )

    assert [r.step for r in split] == [1, 2, 3]
    for one, micro in zip(whole, split, strict=True):
        # The step generated once, for all its completions, and recorded each of them.
        assert len(micro.completions) == 16
        assert [c.completion for c in micro.completions] == [c.completion for c in one.completions]
        assert [c.total for c in micro.completions] == [c.total for c in one.completions]
        assert [c.advantage for c in micro.completions] == [c.advantage for c in one.completions]
        assert micro.reward_mean == one.reward_mean and micro.config_version == 1
        # The accumulated loss is the one-batch loss (dapo normalises over the whole step).
        assert micro.loss == pytest.approx(one.loss, rel=1e-4, abs=1e-6)


def test_micro_batch_size_reaches_trl_as_gradient_accumulation(
    make_spec: SpecFactory, make_sandbox: SandboxFactory
) -> None:
    spec = make_spec(train_steps=1, micro_batch_size=2, activation_checkpointing=True)
    trainer = build_trainer(
        spec, RewardDispatcher(make_sandbox(), spec.reward_config, spec.dataset)
    )
    args: Any = trainer.args  # a GRPOConfig
    assert args.per_device_train_batch_size == 2
    assert args.gradient_accumulation_steps == 8
    # Generation happens once per optimizer step, for the whole step.
    assert args.steps_per_generation == 8
    assert args.generation_batch_size == 16
    assert args.activation_checkpointing and not args.bf16


def test_completions_end_at_their_first_stop_sequence(
    make_spec: SpecFactory, make_sandbox: SandboxFactory
) -> None:
    free = run_steps(make_spec, make_sandbox, train_steps=1, max_completion_length=24)
    stop = " "  # the tiny model writes words: most completions hold a space
    assert sum(stop in c.completion for c in free[0].completions) >= 4

    cut = run_steps(make_spec, make_sandbox, train_steps=1, max_completion_length=24, stop=[stop])
    shortened = 0
    for before, after in zip(free[0].completions, cut[0].completions, strict=True):
        # Same sampling, so the same tokens up to the one that completes the first stop string
        # (a token may carry text past it, e.g. " write").
        assert before.completion.startswith(after.completion)
        if stop in before.completion:
            assert stop in after.completion
            shortened += after.token_count < before.token_count
        else:
            assert after.completion == before.completion
    assert shortened >= 4


def test_stop_length_keeps_the_token_that_completes_the_stop() -> None:
    pieces = ["Hel", "lo", " wor", "ld", "!"]

    def decode(ids: object) -> str:
        return "".join(pieces[i] for i in ids)  # type: ignore[attr-defined]

    ids = list(range(len(pieces)))
    assert stop_length(ids, decode, ["o w"]) == 3
    assert stop_length(ids, decode, ["!", "lo"]) == 2
    assert stop_length(ids, decode, ["?"]) is None
    assert stop_length(ids, decode, []) is None


def test_truncated_completions_are_masked_but_stopped_ones_are_not(
    make_spec: SpecFactory, make_sandbox: SandboxFactory
) -> None:
    spec = make_spec(
        train_steps=1, max_completion_length=6, stop=[" "], mask_truncated_completions=True
    )
    trainer = build_trainer(
        spec, RewardDispatcher(make_sandbox(), spec.reward_config, spec.dataset)
    )
    # TRL's own masking would take a completion ended by a stop string for a truncated one.
    args: Any = trainer.args  # a GRPOConfig
    assert not args.mask_truncated_completions and trainer.mask_truncated_after_stop
    trainer.model.train()  # type: ignore[union-attr]
    batch = next(iter(trainer.get_train_dataloader()))
    output = trainer._generate_and_score_completions(batch)

    kept = output["completion_mask"].sum(dim=1).tolist()
    finished = trainer._finished
    assert len(finished) == len(kept) == 16
    assert any(finished) and not all(finished)  # both kinds occur with 6 tokens and " "
    for ended, tokens in zip(finished, kept, strict=True):
        assert (tokens > 0) == ended
    assert int(output["num_items_in_batch"]) == sum(kept)
