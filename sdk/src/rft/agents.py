"""Agent jobs: the tools and environments a job sends, and what its rollouts record.

During generation the model may call tools: standalone functions (``Tool``) or the public
methods of an environment class (``Environment``: one instance per rollout, ``reset(**row)``
first, an optional ``get_reward()`` scored beside the reward functions). The server receives
only source text and runs it in the job's sandbox; like reward functions, a tool that cannot
travel as source is refused here, with a message that says what to change.

A completion of an agent job carries its ``trajectory`` (the assistant turns and tool results),
and each step its ``agent_metrics``.
"""

from __future__ import annotations

import ast
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict, Discriminator, Field, GetCoreSchemaHandler, Tag
from pydantic_core import core_schema

from rft.errors import AgentSourceError
from rft.reward_source import function_source

_TOOL_HOW_TO_FIX = (
    "define it with `def` at module level in a file, or use rft.Tool.from_file(path, name)"
)


def _read_source(path: str | os.PathLike[str], what: str) -> str:
    file = Path(path)
    if not file.is_file():
        raise AgentSourceError(f"{what} file {str(file)!r} is not a file")
    return file.read_text()


def _top_level_definitions(source: str, where: str) -> dict[str, ast.stmt]:
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        raise AgentSourceError(f"{where} is not valid Python: {error}") from None
    return {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }


class Tool(BaseModel):
    """A standalone tool the model may call: ``source`` defines a function called ``name``.

    Give it type hints and a docstring (with an ``Args:`` section): the model sees the tool's
    schema built from them. ``async def`` is allowed. Build one with :meth:`from_function` (or
    pass the function itself to ``jobs.create(tools=[...])``) or :meth:`from_file`.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    source: str = Field(min_length=1)

    @classmethod
    def from_function(cls, function: Callable[..., Any]) -> Tool:
        """The tool a function defines, sent as its own source (``inspect.getsource``,
        dedented, decorators dropped).

        The function must be self-contained and defined with ``def`` at module level: it may
        use its parameters, builtins and what it imports inside its body, nothing else from
        its file. Lambdas, closures, bound methods and functions typed into an interactive
        interpreter are refused with AgentSourceError; for a tool that needs its file's
        helpers, use :meth:`from_file`.
        """
        try:
            source = function_source(
                function, what="tool", error=AgentSourceError, how_to_fix=_TOOL_HOW_TO_FIX
            )
        except AgentSourceError as error:
            if "module-level names" not in str(error):
                raise
            raise AgentSourceError(
                f"{error}, or send its whole file with rft.Tool.from_file(path, "
                f"{function.__name__!r})"
            ) from None
        return cls(name=function.__name__, source=source)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], name: str) -> Tool:
        """The function ``name`` of a Python file; the whole file is sent (its imports,
        constants and helpers come along)."""
        source = _read_source(path, "tool")
        definition = _top_level_definitions(source, f"tool file {str(path)!r}").get(name)
        if not isinstance(definition, ast.FunctionDef | ast.AsyncFunctionDef):
            raise AgentSourceError(
                f"tool file {str(path)!r} defines no top-level function {name!r}"
            )
        return cls(name=name, source=source)

    def to_request(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source}


class HttpTool(BaseModel):
    """A tool that is an HTTPS endpoint you host (OpenAI agent RFT's shape): each call POSTs
    the model's arguments as a JSON object to ``url``; the endpoint's JSON answer is what the
    model is shown. ``parameters`` is the JSON schema (type object) of the arguments; header
    values may say ``{{secrets.NAME}}`` (the job's secret NAME). A timeout, an HTTP error or
    an answer that is not JSON is the call's error (``timeout``, ``http_status``,
    ``malformed_response``, ``connection``), shown to the model; the job goes on."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    url: str = Field(min_length=1)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = 10.0
    max_retries: int = 2

    def to_request(self) -> dict[str, Any]:
        return {"type": "http", **self.model_dump()}


ToolLike: TypeAlias = Tool | HttpTool | Callable[..., Any]


def to_tool(value: ToolLike) -> Tool | HttpTool:
    if isinstance(value, Tool | HttpTool):
        return value
    if callable(value):
        return Tool.from_function(value)
    raise AgentSourceError(f"a tool must be a function or an rft.Tool, not {type(value).__name__}")


def tools_request(tools: Iterable[ToolLike]) -> list[dict[str, Any]]:
    """The create body's ``tools`` list; two tools of one name are refused before sending."""
    request: list[dict[str, Any]] = []
    for tool in map(to_tool, tools):
        if any(sent["name"] == tool.name for sent in request):
            raise AgentSourceError(f"two tools are named {tool.name!r}: tool names must differ")
        request.append(tool.to_request())
    return request


class Environment(BaseModel):
    """An environment class: one instance per rollout, ``reset(**row)`` called with the dataset
    row first; its public methods are the model's tools, and an optional ``get_reward()`` is
    scored with ``weight`` beside the reward functions.

    ``rft.Environment.from_file("env.py", "Calculator")`` or
    ``rft.Environment(source=..., class_name="Calculator")``.
    """

    model_config = ConfigDict(extra="forbid")

    source: str = Field(min_length=1)
    class_name: str = Field(min_length=1)
    weight: float = 1.0

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], class_name: str, *, weight: float = 1.0
    ) -> Environment:
        """The class ``class_name`` of a Python file; the whole file is sent."""
        source = _read_source(path, "environment")
        definition = _top_level_definitions(source, f"environment file {str(path)!r}").get(
            class_name
        )
        if not isinstance(definition, ast.ClassDef):
            raise AgentSourceError(
                f"environment file {str(path)!r} defines no top-level class {class_name!r}"
            )
        return cls(source=source, class_name=class_name, weight=weight)

    def to_request(self) -> dict[str, Any]:
        return {"source": self.source, "class_name": self.class_name, "weight": self.weight}


def environments_request(
    environments: Mapping[str, Environment | Mapping[str, Any]],
) -> dict[str, dict[str, Any]]:
    return {
        name: (
            environment if isinstance(environment, Environment) else Environment(**environment)
        ).to_request()
        for name, environment in environments.items()
    }


# --- what the server sends back ------------------------------------------------------------


class ToolCall(BaseModel):
    """A call the model made in an assistant turn. ``arguments`` is what the model wrote: an
    object as a dict, else as it came (text that is not a JSON object, or None)."""

    name: str
    arguments: dict[str, Any] | str | None = Field(default_factory=dict)


class ToolError(BaseModel):
    """Why a tool call failed: ``kind`` is exception, timeout, not_serializable, http_status,
    malformed_response, connection (HTTP tools),
    bad_arguments, unknown_tool, environment_lost, killed, ..."""

    kind: str
    message: str


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    truncated: bool = Field(
        False, description="The rollout stopped here (max_turns or the token budget)."
    )


class ToolMessage(BaseModel):
    """A tool's answer to one call: its result as text, or the error it ended in."""

    role: Literal["tool"] = "tool"
    name: str
    content: str = ""
    error: ToolError | None = None
    duration_s: float | None = None
    truncated: bool = Field(False, description="The rollout stopped after this result.")


class OtherMessage(BaseModel):
    """A message of a role this client does not know; kept rather than refused, so an older
    client still reads a newer server's trajectories."""

    model_config = ConfigDict(extra="allow")

    role: str
    content: Any = None


def _message_kind(message: Any) -> str:
    role = message.get("role") if isinstance(message, dict) else getattr(message, "role", None)
    return role if role in ("assistant", "tool") else "other"


TrajectoryMessage: TypeAlias = Annotated[
    Annotated[AssistantMessage, Tag("assistant")]
    | Annotated[ToolMessage, Tag("tool")]
    | Annotated[OtherMessage, Tag("other")],
    Discriminator(_message_kind),
]


class ToolStepMetrics(BaseModel):
    calls: int
    errors: int
    error_rate: float
    mean_duration_s: float | None = None
    error_kinds: dict[str, int] = Field(
        default_factory=dict, description="Errors by kind (timeout, exception, ...)."
    )


class AgentStepMetrics(BaseModel):
    """How a step's rollouts used their tools (``Step.agent_metrics``)."""

    tool_calls_per_rollout: float
    turns_per_rollout: float
    truncated_share: float = Field(description="Share of rollouts cut off before their end.")
    tools: dict[str, ToolStepMetrics] = Field(default_factory=dict)


class _ConfigEntry(BaseModel):
    def to_request(self) -> dict[str, Any]:
        raise NotImplementedError


class ToolConfig(_ConfigEntry):
    """A tool as a job's config holds it; ``version`` is None until the server saves it."""

    source: str
    http: HttpTool | None = Field(
        None, description="An HTTP tool's declaration (its source is generated from it)."
    )
    version: int | None = None
    label: str | None = Field(None, description="name_vN, as shown in graphs.")

    def to_request(self) -> dict[str, Any]:
        if self.http is not None:
            return {"source": self.source, "http": self.http.to_request()}
        return {"source": self.source}


class EnvironmentConfig(_ConfigEntry):
    """An environment as a job's config holds it; ``version`` is None until the server saves
    it."""

    source: str
    class_name: str
    weight: float = 1.0
    version: int | None = None
    label: str | None = Field(None, description="name_vN, as shown in graphs.")

    def to_request(self) -> dict[str, Any]:
        return {"source": self.source, "class_name": self.class_name, "weight": self.weight}


ToolConfigLike: TypeAlias = (
    ToolConfig | Tool | HttpTool | Callable[..., Any] | str | Mapping[str, Any]
)


def to_tool_config(name: str, value: ToolConfigLike) -> ToolConfig:
    """A config's tool from what people write: a ToolConfig (or its dict), an rft.Tool, a
    function (sent as its source) or a source string."""
    if isinstance(value, ToolConfig):
        return value
    if isinstance(value, str):
        return ToolConfig(source=value)
    if isinstance(value, Mapping):
        return ToolConfig.model_validate(value)
    if isinstance(value, HttpTool):
        if value.name != name:
            raise AgentSourceError(f"tool {name!r} is HTTP tool {value.name!r}: names must match")
        return ToolConfig(source="", http=value)
    tool = value if isinstance(value, Tool) else Tool.from_function(value)
    if tool.name != name:
        # The server calls the function the tool is named after.
        raise AgentSourceError(
            f"tool {name!r} is function {tool.name!r}: a tool's name is its function's"
        )
    return ToolConfig(source=tool.source)


def to_environment_config(
    value: EnvironmentConfig | Environment | Mapping[str, Any],
) -> EnvironmentConfig:
    if isinstance(value, EnvironmentConfig):
        return value
    if isinstance(value, Environment):
        return EnvironmentConfig(**value.to_request())
    return EnvironmentConfig.model_validate(value)


class ConfigEntry(Protocol):
    """An entry of a live config (a reward function, tool or environment): what it sends."""

    def to_request(self) -> dict[str, Any]: ...

    def model_dump(self) -> dict[str, Any]: ...


Config = TypeVar("Config", bound=ConfigEntry)


class ConfigMap(dict[str, Config]):
    """A live config's entries by name, converted on the way in: reward functions, tools and
    environments alike (subclasses say how in ``_converted``)."""

    def _converted(self, name: str, value: Any) -> Config:
        raise NotImplementedError

    def __init__(self, entries: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.update(entries or {})

    # Wider than dict's value type on purpose: tools, functions and sources become configs.
    def __setitem__(self, name: str, value: Any) -> None:
        super().__setitem__(name, self._converted(name, value))

    def update(self, *args: Any, **kwargs: Any) -> None:
        for name, value in dict(*args, **kwargs).items():
            self[name] = value

    def to_request(self) -> dict[str, dict[str, Any]]:
        return {name: entry.to_request() for name, entry in self.items()}

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source_type: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            lambda value: value if isinstance(value, cls) else cls(value),
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda entries: {name: entry.model_dump() for name, entry in entries.items()}
            ),
        )


class ToolMap(ConfigMap[ToolConfig]):
    """A config's tools by name: ``config.tools["search"] = search`` (a function, rft.Tool,
    source string or ToolConfig) replaces that tool's code. A list of tools and functions
    builds one keyed by their names."""

    def __init__(
        self, tools: Mapping[str, ToolConfigLike] | Iterable[ToolLike] | None = None
    ) -> None:
        if tools is not None and not isinstance(tools, Mapping):
            tools = {tool.name: tool for tool in map(to_tool, tools)}
        super().__init__(tools)

    def _converted(self, name: str, value: Any) -> ToolConfig:
        return to_tool_config(name, value)


class EnvironmentMap(ConfigMap[EnvironmentConfig]):
    """A config's environments by name: ``config.environments["calc"] =
    rft.Environment.from_file(...)`` replaces that environment's code and weight."""

    def _converted(self, name: str, value: Any) -> EnvironmentConfig:
        return to_environment_config(value)


def content_text(content: Any) -> str:
    """A message's content as text."""
    # Multi-part content ([{"type": "text", "text": ...}, ...]) shows its text parts.
    if isinstance(content, list):
        return " ".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content
        )
    return "" if content is None else str(content)


TOOL_RESULT_CHARS_SHOWN = 400


def _shortened(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def tool_call_text(call: ToolCall) -> str:
    """``search(query="weather", k=3)``: the call as the model made it, values as JSON;
    arguments that are no JSON object are shown as the model wrote them."""
    if isinstance(call.arguments, dict):
        arguments = ", ".join(
            f"{name}={json.dumps(value, ensure_ascii=False)}"
            for name, value in call.arguments.items()
        )
    else:
        arguments = call.arguments or ""
    return f"{call.name}({arguments})"


def trajectory_lines(
    trajectory: Sequence[TrajectoryMessage], *, max_result_chars: int = TOOL_RESULT_CHARS_SHOWN
) -> list[str]:
    """An agent's rollout turn by turn: assistant text, ``-> tool(args)`` for each call,
    ``<- result`` or ``!! kind: message`` for each answer, and where it was cut off."""
    lines: list[str] = []
    for message in trajectory:
        if isinstance(message, AssistantMessage):
            if message.content:
                lines.append(f"assistant: {message.content}")
            lines.extend(f"  -> {tool_call_text(call)}" for call in message.tool_calls)
            if message.truncated:
                lines.append("[truncated: the rollout was cut off here]")
        elif isinstance(message, ToolMessage):
            if message.error is not None:
                lines.append(f"  !! {message.name} {message.error.kind}: {message.error.message}")
            else:
                lines.append(f"  <- {_shortened(message.content, max_result_chars)}")
            if message.truncated:
                lines.append("[truncated: the rollout was cut off here]")
        else:
            lines.append(f"{message.role}: {content_text(message.content)}")
    return lines
