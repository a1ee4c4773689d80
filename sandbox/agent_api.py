"""The contract between the training loop and the code that runs a job's tools and environments.

Agent jobs let the model call user Python during generation: standalone tools (functions) and
environments (a class, one instance per rollout: ``reset(**row)``, public methods as tools, an
optional ``get_reward()``). That code is untrusted, so it runs in the job's sandbox, never in the
trainer: the trainer holds stand-ins with the same names, signatures and docstrings that forward
each call here. Every fault of user code (a raise, a timeout, a result JSON cannot carry, a call
the model got wrong) is an outcome with a typed error, never an exception: it costs only that call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

# Wall limit of one tool call (and of one reset or get_reward) when the job sets none.
DEFAULT_TOOL_TIMEOUT_S = 30.0
# Calls of different rollouts run at once, up to this many per sandbox process.
DEFAULT_MAX_CONCURRENT_CALLS = 64


class ToolErrorKind(StrEnum):
    EXCEPTION = "exception"  # the tool (or reset, get_reward) raised
    TIMEOUT = "timeout"  # it ran past its time limit
    NOT_SERIALIZABLE = "not_serializable"  # it returned something JSON cannot carry
    BAD_ARGUMENTS = "bad_arguments"  # the model's arguments do not fit the signature
    UNKNOWN_TOOL = "unknown_tool"  # the model named a tool that does not exist
    INVALID_RETURN = "invalid_return"  # get_reward returned no finite number
    ENVIRONMENT_LOST = "environment_lost"  # the rollout's instance is gone (reset failed, restart)
    KILLED = "killed"  # the sandbox process died (memory limit, signal)
    SANDBOX = "sandbox"  # our side failed to run the call at all
    # An HTTP tool's endpoint (sandbox/http_tools.py): TIMEOUT above, or one of these.
    HTTP_STATUS = "http_status"  # it answered 4xx, or 5xx after the retries
    MALFORMED_RESPONSE = "malformed_response"  # its answer was not JSON
    CONNECTION = "connection"  # it could not be reached (refused, or by the egress policy)


@dataclass(frozen=True)
class ToolSpec:
    """A standalone tool: ``source`` defines a function named ``name`` (type hints and a
    docstring, as transformers' ``get_json_schema`` expects; ``async def`` allowed)."""

    name: str
    source: str
    version: int = 1


@dataclass(frozen=True)
class EnvironmentSpec:
    """An environment: ``source`` defines class ``class_name`` with ``reset(**row)``, public
    methods (the tools) and optionally ``get_reward()``. ``name`` is how the job (and a dataset's
    ``environment`` column, when there are several) refers to it."""

    name: str
    source: str
    class_name: str
    version: int = 1
    weight: float = 1.0  # of get_reward's score, beside the reward functions


@dataclass(frozen=True)
class ToolParameter:
    name: str
    annotation: str | None  # the annotation's source text ("str", "list[int]"); None: none
    has_default: bool = False
    default: Any = None  # JSON-compatible; only meaningful when has_default


@dataclass(frozen=True)
class ToolSignature:
    """What the model is shown of a tool, read inside the sandbox from the user's code."""

    name: str
    doc: str  # the docstring, verbatim ("" when there is none)
    parameters: tuple[ToolParameter, ...]
    returns: str | None  # the return annotation's source text
    is_async: bool


@dataclass(frozen=True)
class EnvironmentDescription:
    name: str
    class_name: str
    doc: str
    methods: tuple[ToolSignature, ...]  # public methods other than reset and get_reward
    has_reward: bool


@dataclass(frozen=True)
class LoadedAgentCode:
    tools: tuple[ToolSignature, ...]
    environments: dict[str, EnvironmentDescription]


@dataclass(frozen=True)
class ToolCall:
    tool: str
    arguments: dict[str, Any]
    # The environment instance whose method is called; None for a standalone tool.
    rollout: str | None = None


@dataclass
class ToolError:
    kind: ToolErrorKind
    message: str
    traceback: str | None = None


@dataclass
class ToolOutcome:
    result: Any  # the JSON-compatible return value; None when error is set
    error: ToolError | None = None
    duration_s: float = 0.0
    logs: str = ""  # what the call printed, bounded


@dataclass
class ResetOutcome:
    rollout: str  # the new instance's id: pass it in ToolCall.rollout, rewards, close_rollouts
    observation: str | None  # reset's return value as text, appended to the prompt; None: none
    error: ToolError | None = None
    duration_s: float = 0.0


@dataclass
class RewardOutcome:
    reward: float | None
    error: ToolError | None = None
    duration_s: float = 0.0


def conversational_prompt(prompt: Any) -> Any:
    """A prompt as agent jobs need it: chat messages (the chat template renders the tools);
    a text prompt becomes one user message."""
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt


def answer_trajectory(completion: str) -> list[dict[str, Any]]:
    """The trajectory of a rollout that answered at once, without calling a tool, shaped as
    the worker records one (workers.training.agents.build_trajectory): what reward functions
    of an agent job get where no rollout ran (the pre-flight)."""
    return [{"role": "assistant", "content": completion, "truncated": False, "masked_tokens": 0}]


class AgentCodeError(ValueError):
    """Tool or environment code that cannot be used at all: it does not parse, fails on import,
    lacks the named function or class, a class without reset, or an annotation the model cannot
    be shown. ``name`` is the tool's or environment's name."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name!r}: {message}")
        self.name = name
        self.message = message


@dataclass(frozen=True)
class AgentLimits:
    tool_timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
    max_concurrent_calls: int = DEFAULT_MAX_CONCURRENT_CALLS
    log_limit: int = 16 * 1024  # bytes of output kept per call
    extra: dict[str, Any] = field(default_factory=dict)


class AgentSandbox(Protocol):
    """Runs one job's tools and environment instances outside the trainer's process."""

    def load(
        self, tools: Sequence[ToolSpec], environments: Sequence[EnvironmentSpec]
    ) -> LoadedAgentCode:
        """Replace the loaded code (every open rollout is dropped); AgentCodeError if any of
        it cannot load, in which case the previous code stays loaded."""

    def open_rollouts(self, environment: str, rows: Sequence[dict[str, Any]]) -> list[ResetOutcome]:
        """One new instance of ``environment`` per row, each reset with ``reset(**row)``,
        concurrently. A failing reset gives an outcome with an error (its rollout's calls
        then fail with ENVIRONMENT_LOST); it never raises for user-code faults."""

    def call(self, calls: Sequence[ToolCall]) -> list[ToolOutcome]:
        """Run ``calls`` concurrently (calls on the same rollout in the order given), one
        outcome per call in the same order; never raises for user-code or model faults."""

    def rewards(self, rollouts: Sequence[str]) -> list[RewardOutcome]:
        """``get_reward()`` of each rollout's instance, concurrently."""

    def close_rollouts(self, rollouts: Sequence[str]) -> None:
        """Drop these instances; unknown ids are ignored."""

    def close(self) -> None:
        """Stop every process this sandbox started."""
