"""A job's sandboxes (reward functions; an agent job's tools and environments) restart with
new secrets when the next config loads, and only then."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from sandbox.agent_api import AgentCodeError, LoadedAgentCode, ToolCall, ToolOutcome, ToolSpec
from sandbox.api import (
    FunctionResult,
    RewardCodeError,
    RewardFunctionSpec,
    ScoringBatch,
)
from workers.job_sandbox import JobAgentSandbox, JobRewardSandbox
from workers.training.agents.session import AgentSession
from workers.training.reward_dispatch import RewardDispatcher
from workers.training.step_records import RewardConfig

SPEC = RewardFunctionSpec(name="judge", source="def judge(p, c, e):\n    return 1.0\n")


class FakeSandbox:
    def __init__(self, environment: dict[str, str], *, refuse: bool = False) -> None:
        self.environment = environment
        self.refuse = refuse
        self.loaded: list[list[str]] = []
        self.closed = False

    def load(self, functions: Sequence[RewardFunctionSpec]) -> None:
        if self.refuse:
            raise RewardCodeError("judge", "cannot load")
        self.loaded.append([f.name for f in functions])

    def score(self, batch: ScoringBatch) -> dict[str, FunctionResult]:
        return {}

    def close(self) -> None:
        self.closed = True


def test_new_secrets_start_new_processes_at_the_next_load() -> None:
    started: list[FakeSandbox] = []

    def start(environment: dict[str, str]) -> FakeSandbox:
        started.append(FakeSandbox(environment))
        return started[-1]

    sandbox = JobRewardSandbox(start, {"KEY": "old"})
    sandbox.load([SPEC])
    sandbox.stage_environment({"KEY": "old"})  # unchanged: nothing restarts
    sandbox.load([SPEC])
    assert len(started) == 1 and started[0].loaded == [["judge"], ["judge"]]

    sandbox.stage_environment({"KEY": "new"})
    assert len(started) == 1  # staged, not applied until the functions load
    sandbox.load([SPEC])
    assert [s.environment for s in started] == [{"KEY": "old"}, {"KEY": "new"}]
    assert started[0].closed and not started[1].closed and started[1].loaded == [["judge"]]
    sandbox.close()
    assert started[1].closed


def test_a_config_that_cannot_load_keeps_the_old_processes_and_secrets() -> None:
    started: list[FakeSandbox] = []

    def start(environment: dict[str, str]) -> FakeSandbox:
        started.append(FakeSandbox(environment, refuse=environment.get("KEY") == "bad"))
        return started[-1]

    sandbox = JobRewardSandbox(start, {"KEY": "old"})
    sandbox.load([SPEC])
    sandbox.stage_environment({"KEY": "bad"})
    with pytest.raises(RewardCodeError):
        sandbox.load([SPEC])
    assert started[1].closed and not started[0].closed
    sandbox.stage_environment({"KEY": "old"})  # what a later poll stages: no restart
    sandbox.load([SPEC])
    assert len(started) == 2 and started[0].loaded == [["judge"], ["judge"]]


class FakeAgentSandbox:
    """Tools and environments of an agent job, as far as restarting them goes."""

    def __init__(self, environment: dict[str, str], *, refuse: bool = False) -> None:
        self.environment = environment
        self.refuse = refuse
        self.loads = 0
        self.closed = False

    def load(self, tools: Sequence[ToolSpec], environments: Sequence[Any]) -> LoadedAgentCode:
        if self.refuse:
            raise AgentCodeError("lookup", "cannot load")
        self.loads += 1
        return LoadedAgentCode(tools=(), environments={})

    def open_rollouts(self, environment: str, rows: Sequence[dict[str, Any]]) -> list[Any]:
        return []

    def call(self, calls: Sequence[Any]) -> list[ToolOutcome]:
        return [ToolOutcome(result=self.environment.get("KEY")) for _ in calls]

    def rewards(self, rollouts: Sequence[str]) -> list[Any]:
        return []

    def close_rollouts(self, rollouts: Sequence[str]) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def test_an_agent_sandbox_restarts_with_new_secrets_at_the_next_load() -> None:
    started: list[FakeAgentSandbox] = []

    def start(environment: dict[str, str]) -> FakeAgentSandbox:
        started.append(FakeAgentSandbox(environment, refuse=environment.get("KEY") == "bad"))
        return started[-1]

    sandbox = JobAgentSandbox(start, {"KEY": "old"})
    sandbox.load([], [])
    sandbox.stage_environment({"KEY": "bad"})
    with pytest.raises(AgentCodeError):
        sandbox.load([], [])
    assert started[1].closed and not started[0].closed  # the old tools stay in force
    sandbox.stage_environment({"KEY": "new"})
    sandbox.load([], [])
    assert started[0].closed and [s.environment["KEY"] for s in started] == ["old", "bad", "new"]
    # The tools run in the new processes, with the new secret.
    assert [o.result for o in sandbox.call([ToolCall("lookup", {})])] == ["new"]


def dispatcher_with_agents(
    secrets: dict[str, str],
) -> tuple[RewardDispatcher, list[FakeSandbox], list[FakeAgentSandbox]]:
    rewards: list[FakeSandbox] = []
    agents: list[FakeAgentSandbox] = []

    def start_rewards(environment: dict[str, str]) -> FakeSandbox:
        rewards.append(FakeSandbox(environment, refuse=environment.get("KEY") == "bad"))
        return rewards[-1]

    def start_agents(environment: dict[str, str]) -> FakeAgentSandbox:
        agents.append(FakeAgentSandbox(environment))
        return agents[-1]

    config = RewardConfig(version=1, functions=[SPEC], secrets=secrets)
    session = AgentSession(JobAgentSandbox(start_agents, secrets), [{"prompt": "p"}], "index")
    dispatcher = RewardDispatcher(JobRewardSandbox(start_rewards, secrets), config, [], session)
    dispatcher.load_initial()
    return dispatcher, rewards, agents


def stage(dispatcher: RewardDispatcher, secrets: dict[str, str]) -> None:
    """What the rank's observer does when it receives a config version."""
    assert dispatcher.agents is not None
    for sandbox in (dispatcher.sandbox, dispatcher.agents.sandbox):
        sandbox.stage_environment(secrets)  # type: ignore[attr-defined]


def test_rotated_secrets_reach_the_tools_at_the_same_step_as_the_reward_functions() -> None:
    dispatcher, rewards, agents = dispatcher_with_agents({"KEY": "old"})
    stage(dispatcher, {"KEY": "new"})
    # The same functions, tools and environments: only the secrets change.
    dispatcher.apply_config(RewardConfig(version=2, functions=[SPEC], secrets={"KEY": "new"}))
    assert [s.environment["KEY"] for s in rewards] == ["old", "new"]
    assert [s.environment["KEY"] for s in agents] == ["old", "new"]
    assert agents[0].closed and agents[1].loads == 1


def test_a_version_that_cannot_load_leaves_the_tools_with_the_old_secrets() -> None:
    dispatcher, rewards, agents = dispatcher_with_agents({"KEY": "old"})
    stage(dispatcher, {"KEY": "bad"})  # the reward functions refuse to load with it
    with pytest.raises(RewardCodeError):
        dispatcher.apply_config(RewardConfig(version=2, functions=[SPEC], secrets={"KEY": "bad"}))
    assert dispatcher.config.version == 1
    assert dispatcher.agents is not None
    live = dispatcher.agents.sandbox
    assert [o.result for o in live.call([ToolCall("lookup", {})])] == ["old"]
    # The tools had moved to the new secrets' processes; they restarted with the old ones.
    assert [s.environment["KEY"] for s in agents] == ["old", "bad", "old"]
    assert not rewards[0].closed
