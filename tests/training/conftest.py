from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.api import RewardSandbox
from service.demo import demo_dataset
from service.jobs.hyperparameters import Hyperparameters
from tests.tiny import TINY_HYPERPARAMETERS
from workers.training.grpo import TrainingSpec
from workers.training.step_records import RewardConfig

from .harness import letter_config, reward_sandbox


@pytest.fixture
def make_sandbox() -> Iterator[Callable[[], RewardSandbox]]:
    started: list[RewardSandbox] = []

    def make() -> RewardSandbox:
        sandbox = reward_sandbox()
        started.append(sandbox)
        return sandbox

    yield make
    for sandbox in started:
        sandbox.close()


@pytest.fixture(scope="session")
def model_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture
def make_spec(tmp_path: Path, model_cache_dir: Path) -> Callable[..., TrainingSpec]:
    counter = iter(range(1_000_000))

    def make(
        *,
        reward_config: RewardConfig | None = None,
        dataset: list[dict[str, Any]] | None = None,
        resume_from_checkpoint: Path | None = None,
        output_dir: Path | None = None,
        init_adapter: Path | None = None,
        init_optimizer: bool = False,
        **hyperparameters: Any,
    ) -> TrainingSpec:
        return TrainingSpec(
            base_model="rft-tiny",
            dataset=dataset if dataset is not None else demo_dataset(),
            reward_config=reward_config or letter_config(),
            hyperparameters=Hyperparameters(**{**TINY_HYPERPARAMETERS, **hyperparameters}),
            output_dir=output_dir or tmp_path / f"run-{next(counter)}",
            model_cache_dir=model_cache_dir,
            resume_from_checkpoint=resume_from_checkpoint,
            init_adapter=init_adapter,
            init_optimizer=init_optimizer,
        )

    return make
