"""Real supervised runs (TRL's SFTTrainer, PEFT, the tiny model) through run_sft."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest

from service.jobs.hyperparameters import Hyperparameters
from workers.training.sft import run_sft
from workers.training.spec import TrainingOutcome, TrainingSpec
from workers.training.step_records import RewardConfig
from workers.training.trainer_common import ADAPTER_DIRNAME

from .harness import RecordingObserver

# Learnable by heart: each letter's answer is the letter three times over.
CONVERSATIONS = [
    {
        "messages": [
            {"role": "user", "content": f"Say {letter}"},
            {"role": "assistant", "content": " ".join([letter * 3] * 3)},
        ]
    }
    for letter in "abcdefgh"
]
PROMPT_COMPLETIONS = [
    {"prompt": f"Say {letter}:", "completion": f" {letter * 4}"} for letter in "abcdefgh"
]
TRAIN_STEPS = 16


def sft_spec(
    output_dir: Path,
    model_cache_dir: Path,
    *,
    dataset: list[dict[str, Any]] = CONVERSATIONS,
    resume_from_checkpoint: Path | None = None,
    validation: list[dict[str, Any]] | None = None,
    **hyperparameters: Any,
) -> TrainingSpec:
    return TrainingSpec(
        base_model="rft-tiny",
        method="sft",
        dataset=dataset,
        validation=validation,
        reward_config=RewardConfig(version=1, functions=[]),
        hyperparameters=Hyperparameters.model_validate(
            {
                "preset": "tiny-cpu",
                "train_steps": TRAIN_STEPS,
                "checkpoint_every": 8,
                "batch_size": 8,
                "max_length": 64,
                **hyperparameters,
            }
        ),
        output_dir=output_dir,
        model_cache_dir=model_cache_dir,
        resume_from_checkpoint=resume_from_checkpoint,
    )


@pytest.fixture(scope="module")
def chat_run(
    tmp_path_factory: pytest.TempPathFactory, model_cache_dir: Path
) -> tuple[TrainingSpec, TrainingOutcome, RecordingObserver]:
    spec = sft_spec(
        tmp_path_factory.mktemp("sft-chat"),
        model_cache_dir,
        validation=CONVERSATIONS[:2],
        eval_every=8,
    )
    observer = RecordingObserver()
    return spec, run_sft(spec, observer), observer


def test_a_chat_dataset_is_learned_step_by_step(
    chat_run: tuple[TrainingSpec, TrainingOutcome, RecordingObserver],
) -> None:
    _, outcome, observer = chat_run
    assert outcome.steps_completed == TRAIN_STEPS and outcome.stop_reason is None
    records = observer.records
    assert [r.step for r in records] == list(range(1, TRAIN_STEPS + 1))
    losses = [r.loss for r in records]
    assert all(loss is not None for loss in losses)
    # Measured: ~6.1 at step 1, ~1.6 by step 16 (8 examples a step, learning rate 2e-2).
    first, last = statistics.fmean(losses[:3]), statistics.fmean(losses[-3:])  # type: ignore[arg-type]
    assert last < 0.6 * first, losses
    for record in records:
        assert record.reward_mean is None and record.kl is None and not record.completions
        assert record.learning_rate == pytest.approx(2e-2)
        assert record.metrics is not None and record.metrics["grad_norm"] > 0
        assert 0 <= record.metrics["mean_token_accuracy"] <= 1
    assert records[-1].metrics is not None
    assert records[-1].metrics["mean_token_accuracy"] > records[0].metrics["mean_token_accuracy"]  # type: ignore[index]
    # The validation loss after every eval_every-th step and the last.
    evaluated = [r.step for r in records if r.metrics and "eval_loss" in r.metrics]
    assert evaluated == [8, 16]


def test_checkpoints_and_the_adapter_are_laid_out_as_grpo_s(
    chat_run: tuple[TrainingSpec, TrainingOutcome, RecordingObserver],
) -> None:
    spec, outcome, observer = chat_run
    assert [step for step, _ in observer.checkpoints] == [8, 16]
    for step, path in observer.checkpoints:
        assert path == spec.output_dir / f"checkpoint-{step}"
        assert (path / "adapter_model.safetensors").exists()
        assert (path / "trainer_state.json").exists() and (path / "optimizer.pt").exists()
    assert outcome.adapter_path == spec.output_dir / ADAPTER_DIRNAME
    saved = {p.name for p in outcome.adapter_path.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json"} <= saved


def test_a_stopped_run_resumes_from_its_checkpoint_with_the_same_losses(
    chat_run: tuple[TrainingSpec, TrainingOutcome, RecordingObserver],
    tmp_path: Path,
    model_cache_dir: Path,
) -> None:
    """A pause: stop after step 4 (checkpointed there), then resume and finish; the resumed
    steps repeat the uninterrupted run's losses."""
    _, _, uninterrupted = chat_run
    stopping = RecordingObserver(stop_after=4, stop_reason="pausing")
    spec = sft_spec(tmp_path, model_cache_dir, train_steps=8)
    outcome = run_sft(spec, stopping)
    assert outcome.stop_reason == "pausing" and outcome.steps_completed == 4
    assert [step for step, _ in stopping.checkpoints] == [4]

    resumed = RecordingObserver()
    checkpoint = tmp_path / "checkpoint-4"
    run_sft(
        sft_spec(tmp_path, model_cache_dir, train_steps=8, resume_from_checkpoint=checkpoint),
        resumed,
    )
    assert [r.step for r in resumed.records] == [5, 6, 7, 8]
    expected = [r.loss for r in uninterrupted.records[4:8]]
    assert [r.loss for r in resumed.records] == pytest.approx(expected, rel=1e-4)


def test_prompt_completion_rows_train_on_the_completion(
    tmp_path: Path, model_cache_dir: Path
) -> None:
    observer = RecordingObserver()
    run_sft(
        sft_spec(tmp_path, model_cache_dir, dataset=PROMPT_COMPLETIONS, train_steps=8), observer
    )
    losses = [r.loss for r in observer.records]
    assert len(losses) == 8 and losses[-1] < losses[0], losses  # type: ignore[operator]
