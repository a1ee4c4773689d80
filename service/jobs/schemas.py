from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from service.jobs.hyperparameters import Hyperparameters
from service.jobs.status import JobStatus
from service.secrets import JobSecrets

FUNCTION_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
# A name with optional extras and version clauses: no pip options, URLs or paths, so a job
# cannot point pip at another index or at the worker's files.
_CLAUSE = r"\s*(==|>=|<=|~=|!=|>|<)\s*[A-Za-z0-9.*+!_-]+"
REQUIREMENT = re.compile(
    rf"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?({_CLAUSE}(\s*,{_CLAUSE})*)?$"
)
MAX_RUNTIME_PACKAGES = 32
TINY_MODEL_NAME = "rft-tiny"
MAX_REWARD_FUNCTIONS = 16
MAX_SOURCE_BYTES = 200_000


class RewardFunctionCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str = Field(
        description="Python source defining the function: per sample "
        "`def f(prompt, completion, example) -> float`, or TRL's batch form "
        "`def f(prompts, completions, **kwargs) -> list[float]`.",
        max_length=MAX_SOURCE_BYTES,
    )
    weight: float = Field(1.0, description="Multiplier of this function's score in the total.")

    @field_validator("weight")
    @classmethod
    def _finite(cls, weight: float) -> float:
        if not math.isfinite(weight):
            raise ValueError("weight must be a finite number")
        return weight


def check_reward_function_names(
    functions: dict[str, RewardFunctionCreate],
) -> dict[str, RewardFunctionCreate]:
    if not functions:
        raise ValueError("give at least one reward function")
    if len(functions) > MAX_REWARD_FUNCTIONS:
        raise ValueError(f"at most {MAX_REWARD_FUNCTIONS} reward functions")
    for name in functions:
        if not FUNCTION_NAME.match(name):
            raise ValueError(
                f"reward function name {name!r} must be an identifier of at most 64 characters"
            )
    return functions


# A job's functions by name, as JobCreate, config updates and tests take them.
RewardFunctions = Annotated[
    dict[str, RewardFunctionCreate], AfterValidator(check_reward_function_names)
]


class JobCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dataset_id: str
    reward_functions: RewardFunctions
    base_model: str = Field(
        TINY_MODEL_NAME,
        description=f"A Hugging Face model id (checked on the hub at creation), an absolute "
        f"path on the workers under RFT_MODEL_ROOTS, or {TINY_MODEL_NAME!r} for the built-in "
        "tiny model.",
        min_length=1,
        max_length=500,
    )
    hyperparameters: Hyperparameters = Field(default_factory=Hyperparameters)
    name: str | None = Field(None, max_length=300)
    allow_network: bool = Field(
        False, description="Let reward functions reach the network (e.g. LLM-as-judge calls)."
    )
    runtime_packages: list[str] = Field(
        default_factory=list,
        max_length=MAX_RUNTIME_PACKAGES,
        description="Extra pip requirements for the reward functions (e.g. 'rapidfuzz>=3'), "
        "installed for this job only before training.",
    )
    secrets: JobSecrets = Field(
        default_factory=dict,
        description="Environment variables for this job's reward functions only (e.g. an API "
        "key for LLM-as-judge calls). Encrypted at rest, never returned, masked in logs.",
    )

    @field_validator("runtime_packages")
    @classmethod
    def _check_requirements(cls, packages: list[str]) -> list[str]:
        for package in packages:
            if not REQUIREMENT.match(package.strip()):
                raise ValueError(
                    f"runtime package {package!r} is not a plain requirement such as "
                    "'name' or 'name>=1.2' (no pip options, URLs or paths)"
                )
        return [package.strip() for package in packages]


class RewardFunctionState(BaseModel):
    version: int
    weight: float


class Job(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    name: str | None
    status: JobStatus
    failure_reason: str | None
    base_model: str
    dataset_id: str
    hyperparameters: dict[str, Any]
    config_version: int
    applied_config_version: int | None
    steps_completed: int
    allow_network: bool
    runtime_packages: list[str]
    secret_names: list[str] = Field(
        description="The job's secrets, by name; values are never shown."
    )
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @property
    def train_steps(self) -> int:
        return int(self.hyperparameters["train_steps"])


class FunctionStepMetrics(BaseModel):
    version: int
    weight: float
    mean: float | None
    std: float | None
    scored: int
    errors: int
    error_rate: float


class Step(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    step: int
    config_version: int
    reward_mean: float | None
    reward_std: float | None
    loss: float | None
    kl: float | None
    learning_rate: float | None
    duration_s: float
    reward_functions: dict[str, FunctionStepMetrics]
    created_at: datetime


class Completion(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    step: int
    config_version: int
    prompt_index: int
    group_position: int
    dataset_index: int | None
    prompt: Any
    completion: str
    scores: dict[str, float | None]
    total: float | None
    advantage: float | None
    token_count: int


class JobEvent(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    kind: str
    message: str
    step: int | None
    data: dict[str, Any]
    created_at: datetime


class RewardLog(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    step: int
    function_name: str
    function_version: int
    output: str
    truncated: bool


class RewardErrorOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    step: int
    function_name: str
    function_version: int
    kind: str
    message: str
    traceback: str | None
    sample_index: int | None
