"""What the agent sandbox tests share (test_agent_sandbox.py, test_agent_sandbox_faults.py):
the sandbox in each isolation mode, one per module, and the code they load into it."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import textwrap
from collections.abc import Iterator

import pytest

from sandbox.agent_api import (
    AgentLimits,
    EnvironmentSpec,
    ToolCall,
    ToolOutcome,
    ToolSpec,
)
from sandbox.agent_host import ProcessAgentSandbox
from sandbox.isolation import detect_isolation
from sandbox.settings import SandboxSettings
from tests.layers import needs_layer

BWRAP = detect_isolation()
NEEDS_BWRAP = needs_layer(BWRAP, f"bubblewrap unusable: {BWRAP.reason}")
MODES = ["none", pytest.param("bwrap", marks=NEEDS_BWRAP)]
TOOL_TIMEOUT_S = 0.5
JOB_TOKEN = "job-token-value"


def settings_for(mode: str, **overrides: object) -> SandboxSettings:
    values: dict[str, object] = {
        "isolation": mode,
        "memory_limit_mb": 256,
        "kill_grace_s": 0.3,
        "call_timeout_s": 5.0,
        "env": {"JOB_TOKEN": JOB_TOKEN},
    }
    return SandboxSettings(**(values | overrides))  # type: ignore[arg-type]


def open_agent_sandbox(request: pytest.FixtureRequest) -> Iterator[ProcessAgentSandbox]:
    """A module's sandbox (its fixture: ``pytest.fixture(scope="module", params=MODES)``), in
    each isolation mode."""
    os.environ["RFT_TEST_WORKER_SECRET"] = "worker-secret-value"
    limits = AgentLimits(tool_timeout_s=TOOL_TIMEOUT_S, log_limit=200)
    with ProcessAgentSandbox(settings_for(request.param), limits) as running:
        yield running


def tool(name: str, source: str) -> ToolSpec:
    return ToolSpec(name=name, source=textwrap.dedent(source))


def environment(name: str, source: str, class_name: str) -> EnvironmentSpec:
    return EnvironmentSpec(name=name, source=textwrap.dedent(source), class_name=class_name)


COUNTER = environment(
    "counter",
    """
    class Counter:
        \"\"\"A number the model can bump.\"\"\"

        def reset(self, start=0):
            self.value = start
            self.history = []
            return f"the counter starts at {start}"

        def bump(self, by: int = 1) -> int:
            self.value += by
            self.history.append(by)
            return self.value

        def history_so_far(self) -> list:
            return self.history

        def get_reward(self):
            return self.value
    """,
    "Counter",
)
ECHO = tool(
    "echo",
    """
    def echo(text: str) -> str:
        return text
    """,
)


def ok(outcome: ToolOutcome) -> object:
    assert outcome.error is None, outcome.error
    return outcome.result


@contextlib.contextmanager
def tool_time_limit(sandbox: ProcessAgentSandbox, seconds: float) -> Iterator[None]:
    """The module's sandbox with another per-call limit, for one test."""
    before = sandbox.limits
    sandbox.limits = dataclasses.replace(before, tool_timeout_s=seconds)
    try:
        yield
    finally:
        sandbox.limits = before


def assert_still_works(sandbox: ProcessAgentSandbox) -> None:
    assert ok(sandbox.call([ToolCall("echo", {"text": "still here"})])[0]) == "still here"
