"""Small step records for the recording tests."""

from __future__ import annotations

from workers.training.step_records import CompletionRecord, FunctionStepMetrics, StepRecord


def step_record(step: int, *, completions: int = 4, config_version: int = 1) -> StepRecord:
    return StepRecord(
        step=step,
        config_version=config_version,
        reward_mean=0.5,
        reward_std=0.1,
        loss=0.0,
        kl=None,
        learning_rate=0.02,
        duration_s=0.07,
        functions={"f": FunctionStepMetrics("f", 1, 1.0, 0.5, 0.1, completions, 0)},
        completions=[
            CompletionRecord(
                prompt_index=i // 2,
                group_position=i % 2,
                dataset_index=i // 2,
                prompt=f"prompt {i // 2}",
                completion=f"step {step} completion {i}",
                scores={"f": 0.5},
                total=0.5,
                advantage=0.0,
                token_count=5,
            )
            for i in range(completions)
        ],
    )
