"""A job's reward sandbox, whose environment (the job's secrets) can change between steps.

A config update may rotate the job's secrets. A sandbox process gets its environment once,
when it starts, so new secrets mean new processes: the next ``load`` (the worker applying the
config version that carried them) starts a fresh sandbox with the new environment and loads
the functions there, then closes the old one. If the functions cannot load there, the old
sandbox, its environment and its functions stay in force.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sandbox.api import FunctionResult, RewardFunctionSpec, RewardSandbox, ScoringBatch

SandboxFactory = Callable[[dict[str, str]], RewardSandbox]


class JobSandbox:
    """A RewardSandbox that swaps its processes when the job's environment changes."""

    def __init__(self, start: SandboxFactory, environment: dict[str, str]) -> None:
        self._start = start
        self._environment = dict(environment)
        self._pending: dict[str, str] | None = None
        self._current = start(self._environment)

    def stage_environment(self, environment: dict[str, str]) -> None:
        """Use ``environment`` from the next ``load`` on (nothing changes if it is the same)."""
        self._pending = None if environment == self._environment else dict(environment)

    def load(self, functions: Sequence[RewardFunctionSpec]) -> None:
        if self._pending is None:
            self._current.load(functions)
            return
        replacement = self._start(self._pending)
        try:
            replacement.load(functions)
        except BaseException:
            replacement.close()
            raise
        self._current.close()
        self._current, self._environment, self._pending = replacement, self._pending, None

    def score(self, batch: ScoringBatch) -> dict[str, FunctionResult]:
        return self._current.score(batch)

    def close(self) -> None:
        self._current.close()
