"""The worker's side of a run, as the training loop inside a rank sees it."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from workers.training.step_records import RewardConfig, StepRecord


class TrainingObserver(Protocol):
    """The worker's side of a run: it stores what happens and says when to stop."""

    def on_step(self, record: StepRecord) -> None: ...

    def on_checkpoint(self, step: int, path: Path) -> None: ...

    def should_stop(self) -> str | None:
        """A reason to stop after the current step (cancel, pause), or None to go on."""
        ...

    def on_config_rejected(self, version: int, message: str) -> None:
        """A newer config could not be loaded; training goes on with the one in force."""
        ...

    def poll_reward_config(self, current_version: int, starting_step: int) -> RewardConfig | None:
        """A newer reward config than ``current_version`` to apply from ``starting_step`` (the
        step about to begin; called once before each step's generation), if any."""
        ...
