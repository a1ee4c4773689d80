"""A job's sandbox restarts with new secrets when the next config loads, and only then."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from sandbox.api import (
    FunctionResult,
    RewardCodeError,
    RewardFunctionSpec,
    ScoringBatch,
)
from workers.job_sandbox import JobSandbox

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

    sandbox = JobSandbox(start, {"KEY": "old"})
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

    sandbox = JobSandbox(start, {"KEY": "old"})
    sandbox.load([SPEC])
    sandbox.stage_environment({"KEY": "bad"})
    with pytest.raises(RewardCodeError):
        sandbox.load([SPEC])
    assert started[1].closed and not started[0].closed
    sandbox.stage_environment({"KEY": "old"})  # what a later poll stages: no restart
    sandbox.load([SPEC])
    assert len(started) == 2 and started[0].loaded == [["judge"], ["judge"]]
