"""A job's sandboxes, whose environment (the job's secrets) can change between steps.

A config update may rotate the job's secrets. A sandbox process gets its environment once, when
it starts, so new secrets mean new processes: the next ``load`` (the worker applying the config
version that carried them) starts a fresh sandbox with the new environment and loads the code
there, then closes the old one. If the code cannot load there, the old sandbox, its environment
and its code stay in force. The reward functions' sandbox (``JobRewardSandbox``) and an agent
job's tools and environments (``JobAgentSandbox``) restart alike: both see the secrets in force
at the same step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from sandbox.agent_api import (
    AgentSandbox,
    EnvironmentSpec,
    LoadedAgentCode,
    ResetOutcome,
    RewardOutcome,
    ToolCall,
    ToolOutcome,
    ToolSpec,
)
from sandbox.api import FunctionResult, RewardFunctionSpec, RewardSandbox, ScoringBatch


class _Closable(Protocol):
    def close(self) -> None: ...


SandboxT = TypeVar("SandboxT", bound=_Closable)
Loaded = TypeVar("Loaded")


class _RestartsWithNewEnvironment(Generic[SandboxT]):
    def __init__(self, start: Callable[[dict[str, str]], SandboxT], environment: dict[str, str]):
        self._start = start
        self._environment = dict(environment)
        self._pending: dict[str, str] | None = None
        self._current = start(self._environment)

    def stage_environment(self, environment: dict[str, str]) -> None:
        """Use ``environment`` from the next ``load`` on (nothing changes if it is the same)."""
        self._pending = None if environment == self._environment else dict(environment)

    def _load(self, load: Callable[[SandboxT], Loaded]) -> Loaded:
        if self._pending is None:
            return load(self._current)
        replacement = self._start(self._pending)
        try:
            loaded = load(replacement)
        except BaseException:
            replacement.close()
            raise
        self._current.close()
        self._current, self._environment, self._pending = replacement, self._pending, None
        return loaded

    def close(self) -> None:
        self._current.close()


class JobRewardSandbox(_RestartsWithNewEnvironment[RewardSandbox]):
    """A RewardSandbox that swaps its processes when the job's environment changes."""

    def load(self, functions: Sequence[RewardFunctionSpec]) -> None:
        self._load(lambda sandbox: sandbox.load(functions))

    def score(self, batch: ScoringBatch) -> dict[str, FunctionResult]:
        return self._current.score(batch)


class JobAgentSandbox(_RestartsWithNewEnvironment[AgentSandbox]):
    """An AgentSandbox that swaps its processes when the job's environment changes (a load
    drops every open rollout anyway, so no rollout outlives its sandbox)."""

    def load(
        self, tools: Sequence[ToolSpec], environments: Sequence[EnvironmentSpec]
    ) -> LoadedAgentCode:
        return self._load(lambda sandbox: sandbox.load(tools, environments))

    def open_rollouts(self, environment: str, rows: Sequence[dict[str, Any]]) -> list[ResetOutcome]:
        return self._current.open_rollouts(environment, rows)

    def call(self, calls: Sequence[ToolCall]) -> list[ToolOutcome]:
        return self._current.call(calls)

    def rewards(self, rollouts: Sequence[str]) -> list[RewardOutcome]:
        return self._current.rewards(rollouts)

    def close_rollouts(self, rollouts: Sequence[str]) -> None:
        self._current.close_rollouts(rollouts)
