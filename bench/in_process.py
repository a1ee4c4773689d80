"""What the overhead benches (bench_overhead.py, bench_sft.py) share: one thread for torch on
both sides, a run's figures, and the in-process stand-ins that swap parts of the service out
(rewards called in this process, an observer that keeps each step's end time)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.api import FunctionResult, RewardFunctionSpec, ScoringBatch
from workers.database_observer import DatabaseObserver
from workers.training.step_records import RewardConfig, StepRecord

# Both sides run torch on one thread: on a shared 2-core machine, two OpenMP threads that
# spin-wait for each other made step times swing tenfold between runs.
THREADS_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@dataclass
class Run:
    kind: str
    step_s: list[float] = field(default_factory=list)  # wall time of each step (step 2 on)
    rewards: list[float] = field(default_factory=list)  # per-step reward mean
    function_means: list[dict[str, float]] = field(default_factory=list)
    recorded_duration_s: list[float] = field(default_factory=list)  # service: duration_s
    phases: list[dict[str, float]] = field(default_factory=list)  # per step (step 2 on)
    dtypes: dict[str, str] = field(default_factory=dict)
    events: dict[str, list[float]] = field(default_factory=dict)  # recording: [seconds, calls]
    end_to_end_s: float = 0.0
    train_s: float = 0.0  # first step begins -> last step ends
    reads_s: float = 0.0  # per step, in should_stop + poll_reward_config (in-process runs)
    on_step_s: float = 0.0  # per step, in on_step (in-process runs)


class InProcessSandbox:
    """RewardSandbox that calls the demo functions in this process: no pipes, no isolation."""

    def __init__(self) -> None:
        self._names: list[str] = []
        self._namespace: dict[str, Any] = {}

    def load(self, functions: Sequence[RewardFunctionSpec]) -> None:
        for spec in functions:
            exec(spec.source, self._namespace)  # our own bundled demo code
        self._names = [spec.name for spec in functions]

    def score(self, batch: ScoringBatch) -> dict[str, FunctionResult]:
        return {
            name: FunctionResult(
                name=name,
                version=1,
                scores=[
                    float(self._namespace[name](p, c, e))
                    for p, c, e in zip(
                        batch.prompts, batch.completions, batch.examples, strict=True
                    )
                ],
            )
            for name in self._names
        }

    def close(self) -> None:
        pass


class TimedObserver:
    """Wraps an observer (or none) and keeps each step's end time."""

    def __init__(self, inner: DatabaseObserver | None) -> None:
        self.inner = inner
        self.ends: list[float] = []
        self.rewards: list[float] = []
        self.reads_s = 0.0  # in should_stop and poll_reward_config: the job row, read per step
        self.on_step_s = 0.0

    def on_step(self, record: StepRecord) -> None:
        started = time.perf_counter()
        if self.inner is not None:
            self.inner.on_step(record)
        self.ends.append(time.perf_counter())
        self.on_step_s += self.ends[-1] - started
        self.rewards.append(record.reward_mean if record.reward_mean is not None else math.nan)

    def on_checkpoint(self, step: int, path: Path) -> None:
        if self.inner is not None:
            self.inner.on_checkpoint(step, path)

    def should_stop(self) -> str | None:
        if self.inner is None:
            return None
        started = time.perf_counter()
        try:
            return self.inner.should_stop()
        finally:
            self.reads_s += time.perf_counter() - started

    def on_config_rejected(self, version: int, message: str) -> None:
        pass

    def poll_reward_config(self, current_version: int, starting_step: int) -> RewardConfig | None:
        if self.inner is None:
            return None
        started = time.perf_counter()
        try:
            return self.inner.poll_reward_config(current_version, starting_step)
        finally:
            self.reads_s += time.perf_counter() - started
