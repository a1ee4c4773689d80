"""Stops a job whose reward function keeps failing, instead of training on no signal."""

from __future__ import annotations

from dataclasses import dataclass, field

from workers.training.step_records import StepRecord


@dataclass
class RewardCircuitBreaker:
    max_error_rate: float
    patience: int
    _streaks: dict[str, int] = field(default_factory=dict)
    tripped: str | None = None

    def observe(self, record: StepRecord) -> str | None:
        """Feed one step; returns (and keeps) the reason once a function has failed too often."""
        for name, metrics in record.functions.items():
            samples = metrics.scored + metrics.errors
            rate = metrics.errors / samples if samples else 0.0
            self._streaks[name] = (
                self._streaks.get(name, 0) + 1 if rate > self.max_error_rate else 0
            )
            if self._streaks[name] >= self.patience and self.tripped is None:
                result = record.function_results.get(name)
                last = (
                    f"; last error: {result.errors[-1].kind.value}: {result.errors[-1].message}"
                    if result and result.errors
                    else ""
                )
                self.tripped = (
                    f"reward function {name!r} (v{metrics.version}) failed on more than "
                    f"{self.max_error_rate:.0%} of samples for {self.patience} consecutive steps "
                    f"(step {record.step}: {rate:.0%}){last}"
                )
        return self.tripped
