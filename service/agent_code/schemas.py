"""A job's tools and environments as requests give them (job creation, config updates) and
as the config shows them. Whether the code loads is checked in the sandbox
(service.agent_code.service), not here."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    model_validator,
)

from service.http_tools.schemas import HttpToolCreate
from service.reward_functions.schemas import (
    FUNCTION_NAME,
    MAX_SOURCE_BYTES,
    FiniteWeight,
    check_identifier_names,
)

MAX_TOOLS = 32
MAX_ENVIRONMENTS = 8

TOOL_SOURCE_DESCRIPTION = (
    "Python source defining a function named `name`, with type hints and a Google-style "
    "docstring (what the model is shown of it); `async def` too."
)


class ToolCreate(BaseModel):
    """A standalone tool the model may call during a rollout."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        pattern=FUNCTION_NAME.pattern,
        description="The function `source` defines: the name the model calls it by.",
    )
    source: str = Field(description=TOOL_SOURCE_DESCRIPTION, max_length=MAX_SOURCE_BYTES)


def _tool_form(value: Any) -> str:
    if isinstance(value, dict):
        return "http" if "url" in value or value.get("type") == "http" else "code"
    return "http" if isinstance(value, HttpToolCreate) else "code"


# A tool in Python (`source`) or an HTTP tool (`url`, OpenAI agent RFT's shape).
AnyToolCreate = Annotated[
    Annotated[ToolCreate, Tag("code")] | Annotated[HttpToolCreate, Tag("http")],
    Discriminator(_tool_form),
]


class EnvironmentCreate(BaseModel):
    """A class, one instance per rollout: ``reset(**row)`` with the dataset row, its public
    methods as tools, and optionally ``get_reward()``, a score beside the reward functions."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(
        description="Python source defining the class `class_name`.", max_length=MAX_SOURCE_BYTES
    )
    class_name: str = Field(pattern=FUNCTION_NAME.pattern, description="The class to use.")
    weight: FiniteWeight = Field(
        1.0, description="Multiplier of get_reward's score in the total, beside the functions'."
    )


def check_tool_names(tools: list[Any]) -> list[Any]:
    """Each tool once: the model calls them by name."""
    seen: set[str] = set()
    for tool in tools:
        if tool.name in seen:
            raise ValueError(f"tool {tool.name!r} is given twice; give each tool once")
        seen.add(tool.name)
    return tools


def check_environment_names(environments: dict[str, Any]) -> dict[str, Any]:
    return check_identifier_names(environments, what="environment", most=MAX_ENVIRONMENTS)


# The rules the validators enforce on a dict of environments, stated in the OpenAPI document.
ENVIRONMENT_NAMES_SCHEMA: dict[str, Any] = {
    "maxProperties": MAX_ENVIRONMENTS,
    "propertyNames": {"pattern": FUNCTION_NAME.pattern},
}


def one_environment_form(data: Any) -> Any:
    """A request body whose ``environment`` shorthand became its one ``environments`` entry,
    named after its class. Giving both is refused: which would win is not obvious."""
    if not isinstance(data, dict) or data.get("environment") is None:
        return data
    if data.get("environments"):
        raise ValueError(
            "give environment (one environment) or environments (several, by name), not both"
        )
    environment = data["environment"]
    if not isinstance(environment, dict) or not isinstance(environment.get("class_name"), str):
        return data  # the field's own validation words the error
    rest = {key: value for key, value in data.items() if key != "environment"}
    return {**rest, "environments": {environment["class_name"]: environment}}


def reward_sources_required(
    reward_functions: dict[str, Any], environments: dict[str, Any] | None
) -> None:
    """At least one reward function, unless environments are given: their get_reward may
    score the rollouts instead (checked once the code is loaded, in the service)."""
    if not reward_functions and not environments:
        raise ValueError(
            "give at least one reward function (or an environment whose get_reward scores "
            "the rollouts)"
        )


# The request's rule, for the OpenAPI document: beside ONE_REWARD_FUNCTION_GIVEN, an environment
# may stand in for the reward functions.
ENVIRONMENT_GIVEN: list[Any] = [
    {"required": ["environment"]},
    {"required": ["environments"], "properties": {"environments": {"minProperties": 1}}},
]


class AgentCodeInput(BaseModel):
    """A job's tools and environments at creation: what makes it an agent job."""

    tools: Annotated[list[AnyToolCreate], AfterValidator(check_tool_names)] = Field(
        default_factory=list,
        max_length=MAX_TOOLS,
        description="Standalone tools the model may call during a rollout, each a function "
        "(`source`) or an HTTP endpoint (`url`, docs/agents.md); names unique, also against "
        "the environments' methods.",
    )
    environments: Annotated[
        dict[str, EnvironmentCreate],
        AfterValidator(check_environment_names),
        Field(json_schema_extra=ENVIRONMENT_NAMES_SCHEMA),
    ] = Field(
        default_factory=dict,
        description="Environments by name: one instance per rollout, whose public methods "
        "are the model's tools. With several, a dataset's `environment` column names each "
        "row's.",
    )
    environment: EnvironmentCreate | None = Field(
        None,
        description="Shorthand for one environment, named after its class; not with environments.",
    )

    @model_validator(mode="before")
    @classmethod
    def _one_environment_form(cls, data: Any) -> Any:
        return one_environment_form(data)


class ToolConfig(BaseModel):
    source: str
    http: HttpToolCreate | None = Field(
        None, description="An HTTP tool's declaration (its `source` is generated from it)."
    )
    version: int = Field(description="Bumped each time this tool's source changes.")
    label: str = Field(description="name_vN.")


class EnvironmentConfig(EnvironmentCreate):
    version: int = Field(description="Bumped each time the source or class_name changes.")
    label: str = Field(description="name_vN.")


class ToolUpdate(BaseModel):
    """A tool as JobConfig shows it; `version` and `label` are accepted and ignored. An HTTP
    tool's `http` declaration, when given, wins over `source` (which is generated from it)."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field("", description=TOOL_SOURCE_DESCRIPTION, max_length=MAX_SOURCE_BYTES)
    http: HttpToolCreate | None = Field(None, description="An HTTP tool's declaration.")
    version: int | None = Field(None, description="Read-only: ignored.")
    label: str | None = Field(None, description="Read-only: ignored.")

    @model_validator(mode="after")
    def _source_or_http(self) -> ToolUpdate:
        if not self.source and self.http is None:
            raise ValueError("give the tool's source, or an HTTP tool's declaration as http")
        return self


class EnvironmentUpdate(EnvironmentCreate):
    """An environment as JobConfig shows it; `version` and `label` are accepted and ignored."""

    version: int | None = Field(None, description="Read-only: ignored.")
    label: str | None = Field(None, description="Read-only: ignored.")
