"""The demo job (the demo dataset, its reward functions at version 1, the demo's
hyperparameters) as ``run_grpo`` receives it, for the benchmarks that train in their own process
rather than through a worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sandbox.reward_host import create_sandbox
from sandbox.settings import SandboxSettings
from service.demo import DEMO_HYPERPARAMETERS, demo_dataset, demo_reward_functions
from service.jobs.hyperparameters import Hyperparameters
from workers.training.generation import Generation, transformers_generation
from workers.training.grpo import TrainingSpec, run_grpo
from workers.training.step_records import RewardConfig


def demo_hyperparameters(steps: int, **overrides: Any) -> Hyperparameters:
    """What the service builds from demo_job_request(train_steps=steps), ``overrides`` aside."""
    return Hyperparameters(**{**DEMO_HYPERPARAMETERS, "train_steps": steps, **overrides})


def demo_spec(
    base_model: str,
    hyperparameters: Hyperparameters,
    output_dir: Path,
    model_cache_dir: Path,
    generation: Generation | None = None,
) -> TrainingSpec:
    """The demo dataset and reward functions trained on ``base_model`` as ``hyperparameters``
    say (generation: transformers' unless given)."""
    return TrainingSpec(
        base_model=base_model,
        dataset=demo_dataset(),
        reward_config=RewardConfig(version=1, functions=demo_reward_functions()),
        hyperparameters=hyperparameters,
        output_dir=output_dir,
        model_cache_dir=model_cache_dir,
        generation=generation or transformers_generation(),
    )


def run_unisolated(spec: TrainingSpec, observer: Any) -> None:
    """run_grpo with the reward functions in a sandbox process without isolation, closed when
    the run ends."""
    sandbox = create_sandbox(SandboxSettings(isolation="none"))
    try:
        run_grpo(spec, sandbox, observer)
    finally:
        sandbox.close()
