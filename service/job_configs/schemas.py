from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Tag, model_validator

from service.agent_code.schemas import (
    ENVIRONMENT_GIVEN,
    ENVIRONMENT_NAMES_SCHEMA,
    MAX_TOOLS,
    EnvironmentConfig,
    EnvironmentUpdate,
    ToolConfig,
    ToolUpdate,
    check_environment_names,
    reward_sources_required,
)
from service.reward_functions.schemas import (
    FUNCTION_NAME,
    MAX_REWARD_FUNCTIONS,
    ONE_REWARD_FUNCTION_GIVEN,
    REWARD_MODEL_FORM,
    RewardFunctionCreate,
    RewardFunctionSettings,
    RewardModelCreate,
    RewardModelSettings,
    RewardModuleInput,
    check_reward_function_count,
    reward_entry_discriminator,
)
from service.secrets import check_secret_changes


class RewardFunctionConfig(RewardFunctionSettings):
    source: str
    version: int = Field(description="Bumped each time this function's source changes.")
    label: str = Field(description="name_vN, as shown in graphs.")


class RewardModelConfig(RewardModelSettings):
    model: str
    version: int = Field(description="Bumped each time this entry names another model.")
    label: str = Field(description="name_vN, as shown in graphs.")


class JobConfig(BaseModel):
    job_id: str
    version: int
    reward_functions: dict[str, RewardFunctionConfig | RewardModelConfig]
    tools: dict[str, ToolConfig] = Field(
        default_factory=dict, description="Agent jobs: the standalone tools, by name."
    )
    environments: dict[str, EnvironmentConfig] = Field(
        default_factory=dict, description="Agent jobs: the environments, by name."
    )
    temperature: float | None
    top_p: float | None
    allow_network: bool
    runtime_packages: list[str]
    secret_names: list[str] = Field(
        description="Set at job creation or by a config update's `secrets`; values are never shown."
    )
    created_at: datetime
    applied_at_step: int | None = Field(
        description="The first step this version scored; null until the worker applies it."
    )


class RewardFunctionUpdate(RewardFunctionCreate):
    """A function as JobConfig shows it: `version` and `label` are derived from the source, so
    they are accepted (a GET document can be sent back) and ignored."""

    version: int | None = Field(None, description="Read-only: ignored.")
    label: str | None = Field(None, description="Read-only: ignored.")


class RewardModelUpdate(RewardModelCreate):
    """A reward model as JobConfig shows it (`version` and `label` accepted, ignored)."""

    version: int | None = Field(None, description="Read-only: ignored.")
    label: str | None = Field(None, description="Read-only: ignored.")


# One entry of an update: code, or a reward model.
RewardEntryUpdate = Annotated[
    Annotated[RewardFunctionUpdate, Tag("code")]
    | Annotated[RewardModelUpdate, Tag(REWARD_MODEL_FORM)],
    reward_entry_discriminator(),
]


class JobConfigUpdate(RewardModuleInput):
    """The whole editable config: functions missing here are removed from the next step on,
    and so are tools and environments missing from `tools` and `environments` when those are
    given (left out, the job's current ones stay as they are).

    The document GET returned is accepted as it is. Its read-only fields are ignored
    (`version`, `created_at`, `applied_at_step`, each function's, tool's and environment's
    `version` and `label`) or, where a different value would mean a change that cannot happen
    here, checked (`job_id`, `allow_network`, `runtime_packages`, `secret_names`: a 400 says
    what to do instead).
    """

    # At least one reward function, here or in reward_module, or environments to score.
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"anyOf": ONE_REWARD_FUNCTION_GIVEN + ENVIRONMENT_GIVEN}
    )

    reward_functions: Annotated[
        dict[str, RewardEntryUpdate],
        AfterValidator(check_reward_function_count),
        # The validator's rules, stated in the OpenAPI document.
        Field(
            json_schema_extra={
                "maxProperties": MAX_REWARD_FUNCTIONS,
                "propertyNames": {"pattern": FUNCTION_NAME.pattern},
            }
        ),
    ] = Field(
        default_factory=dict,
        description="Functions (or reward models) by name. Empty (or left out) only when "
        "every environment scores the rollouts with get_reward.",
    )
    tools: (
        Annotated[
            dict[str, ToolUpdate],
            Field(
                max_length=MAX_TOOLS,
                json_schema_extra={"propertyNames": {"pattern": FUNCTION_NAME.pattern}},
            ),
        ]
        | None
    ) = Field(
        None,
        description="Agent jobs: every tool, by name (the function its source defines); a "
        "changed source gets a new version. null or left out: keep the current tools.",
    )
    environments: (
        Annotated[
            dict[str, EnvironmentUpdate],
            AfterValidator(check_environment_names),
            Field(json_schema_extra=ENVIRONMENT_NAMES_SCHEMA),
        ]
        | None
    ) = Field(
        None,
        description="Agent jobs: every environment, by name; a changed source or class_name "
        "gets a new version, a changed weight only a new config version. null or left out: "
        "keep the current environments.",
    )
    temperature: float | None = Field(None, gt=0, le=5.0, description="null: keep the current.")
    top_p: float | None = Field(None, gt=0, le=1.0, description="null: keep the current.")
    secrets: Annotated[dict[str, str | None], AfterValidator(check_secret_changes)] | None = Field(
        None,
        description="Changes to the job's secrets, applied from the same step as the rest "
        "of this version: a value sets or replaces a secret, null removes it, names not "
        "given keep their values. Write-only, encrypted at rest like the job's own.",
    )
    # Read-only fields of JobConfig, so that GET -> edit -> PUT works.
    job_id: str | None = Field(None, description="Read-only: must be this job's id.")
    version: int | None = Field(None, description="Read-only: ignored; send it as If-Match.")
    allow_network: bool | None = Field(None, description="Read-only: fixed at job creation.")
    runtime_packages: list[str] | None = Field(
        None, description="Read-only: fixed at job creation."
    )
    secret_names: list[str] | None = Field(
        None, description="Read-only: must be the job's current names; change them with secrets."
    )
    created_at: datetime | None = Field(None, description="Read-only: ignored.")
    applied_at_step: int | None = Field(None, description="Read-only: ignored.")

    @model_validator(mode="after")
    def _something_scores(self) -> JobConfigUpdate:
        reward_sources_required(self.reward_functions, self.environments)
        return self


class JobConfigUpdated(BaseModel):
    version: int
    applies_from_step: int = Field(
        description="The first step that will use this version: the step after the one the "
        "worker has begun (1 for a job that has not started; after a pause or a lost worker, "
        "the step after the checkpoint it resumes from). A newer version stored before that "
        "step begins replaces this one there."
    )
    secrets_changed: bool = Field(
        False, description="Whether this update set, replaced or removed secrets."
    )
    changed_functions: list[str] = Field(description="Functions whose source got a new version.")
    added_functions: list[str]
    removed_functions: list[str]
    changed_tools: list[str] = Field(
        default_factory=list, description="Tools whose source got a new version."
    )
    added_tools: list[str] = Field(default_factory=list)
    removed_tools: list[str] = Field(default_factory=list)
    changed_environments: list[str] = Field(
        default_factory=list,
        description="Environments whose source or class_name got a new version (a new weight "
        "alone is not listed).",
    )
    added_environments: list[str] = Field(default_factory=list)
    removed_environments: list[str] = Field(default_factory=list)
    config: JobConfig
