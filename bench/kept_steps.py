"""A training observer for benchmarks that run ``run_grpo`` directly: it keeps every step's
record and never stops the run or changes its config."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class KeptSteps:
    def __init__(self) -> None:
        self.records: list[Any] = []  # workers.training.step_records.StepRecord

    @property
    def durations(self) -> list[float]:
        return [record.duration_s for record in self.records]

    def on_step(self, record: Any) -> None:
        self.records.append(record)

    def on_checkpoint(self, step: int, path: Path) -> None:
        pass

    def on_config_rejected(self, version: int, message: str) -> None:
        pass

    def should_stop(self) -> str | None:
        return None

    def poll_reward_config(self, current_version: int, starting_step: int) -> None:
        return None
