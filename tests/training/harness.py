"""What the training tests run with: the real sandbox, a reward config, a scripted observer."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.api import RewardFunctionSpec, RewardSandbox
from sandbox.reward_host import create_sandbox
from sandbox.settings import SandboxSettings
from service.demo import demo_rewards_source
from service.jobs.hyperparameters import Hyperparameters
from workers.training.sft import run_sft
from workers.training.spec import TrainingSpec
from workers.training.step_records import RewardConfig, StepRecord

# What the supervised warm-up (one_word_answers) teaches: 'Say X:' is answered ' X'.
WORDS = ("yes", "no", "ok", "cat", "dog", "sun")


def reward_sandbox() -> RewardSandbox:
    """The real process sandbox, without namespaces: the tests need no bubblewrap or root."""
    return create_sandbox(SandboxSettings(isolation="none"))


def letter_config(version: int = 1, **changes: Any) -> RewardConfig:
    source = demo_rewards_source()
    return RewardConfig(
        version=version,
        functions=[RewardFunctionSpec("letter_fraction", source, weight=1.0, version=version)],
        **changes,
    )


@dataclass
class RecordingObserver:
    # Reward config to hand out when step N is about to start (N is 1-based).
    config_updates: dict[int, RewardConfig] = field(default_factory=dict)
    # Ask to stop once this many steps have been reported.
    stop_after: int | None = None
    stop_reason: str = "cancelled by test"
    # The step a run starts at: 1, or checkpoint + 1 when resuming.
    first_step: int = 1

    records: list[StepRecord] = field(default_factory=list)
    checkpoints: list[tuple[int, Path]] = field(default_factory=list)
    polled_versions: list[int] = field(default_factory=list)
    rejected_configs: list[tuple[int, str]] = field(default_factory=list)

    def on_step(self, record: StepRecord) -> None:
        self.records.append(record)

    def on_checkpoint(self, step: int, path: Path) -> None:
        self.checkpoints.append((step, path))

    def on_config_rejected(self, version: int, message: str) -> None:
        self.rejected_configs.append((version, message))

    def should_stop(self) -> str | None:
        if self.stop_after is not None and len(self.records) >= self.stop_after:
            return self.stop_reason
        return None

    def poll_reward_config(self, current_version: int, starting_step: int) -> RewardConfig | None:
        self.polled_versions.append(current_version)
        # The trainer polls exactly once before each step.
        next_step = self.first_step + len(self.polled_versions) - 1
        assert starting_step == next_step, (starting_step, next_step)
        update = self.config_updates.get(next_step)
        if update is not None and update.version > current_version:
            return update
        return None

    @property
    def rewards(self) -> list[float | None]:
        return [record.reward_mean for record in self.records]


def one_word_answers(output_dir: Path, model_cache_dir: Path) -> Path:
    """An adapter that makes the tiny model answer 'Say X:' with ' X' and stop (a short SFT
    run), as a job's init_from parent would leave it."""
    spec = TrainingSpec(
        base_model="rft-tiny",
        method="sft",
        dataset=[{"prompt": f"Say {w}:", "completion": f" {w}"} for w in WORDS],
        reward_config=RewardConfig(version=1, functions=[]),
        hyperparameters=Hyperparameters.model_validate(
            {
                "preset": "tiny-cpu",
                "train_steps": 24,
                "batch_size": 6,
                "max_length": 32,
                "learning_rate": 2e-2,
            }
        ),
        output_dir=output_dir,
        model_cache_dir=model_cache_dir,
    )
    return run_sft(spec, RecordingObserver()).adapter_path
