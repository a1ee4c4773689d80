from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from sandbox.api import DEFAULT_MAX_CONCURRENCY, MAX_CONCURRENCY_LIMIT, RewardCodeError
from sandbox.reward_modules import extract_reward_function
from service.secrets import JobSecrets

Named = TypeVar("Named", bound=Collection[str])

# Runtime packages are plain requirements (no pip options, URLs or paths), for jobs and tests.
_CLAUSE = r"\s*(==|>=|<=|~=|!=|>|<)\s*[A-Za-z0-9.*+!_-]+"
REQUIREMENT = re.compile(
    rf"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?({_CLAUSE}(\s*,{_CLAUSE})*)?$"
)
MAX_RUNTIME_PACKAGES = 32


def plain_requirements(packages: list[str]) -> list[str]:
    """``packages`` stripped, or ValueError naming the first that is not a plain requirement."""
    for package in packages:
        if not REQUIREMENT.match(package.strip()):
            raise ValueError(
                f"runtime package {package!r} is not a plain requirement such as "
                "'name' or 'name>=1.2' (no pip options, URLs or paths)"
            )
    return [package.strip() for package in packages]


FUNCTION_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
MAX_REWARD_FUNCTIONS = 16
MAX_SOURCE_BYTES = 200_000
MAX_TEST_SAMPLES = 256

# How a function runs, stored with each config version beside its weight: changing them gives
# a new config version, not a new function version.
FUNCTION_RUN_SETTINGS = ("max_concurrency", "sample_timeout_s", "rate_limit_per_s")
# A reward entry may name a reward model instead of code. It is stored as a function version
# whose form is this and whose source is the model (a new model is a new version); its
# settings, like a function's run settings, are part of the config version.
REWARD_MODEL_FORM = "model"
REWARD_MODEL_SETTINGS = ("batch_size", "max_length")
MAX_MODEL_NAME_CHARS = 500


def _finite_weight(weight: float) -> float:
    if not math.isfinite(weight):
        raise ValueError("weight must be a finite number")
    return weight


# A score's multiplier in the total: reward functions', reward models' and environments'.
FiniteWeight = Annotated[float, AfterValidator(_finite_weight)]


class WeightedReward(BaseModel):
    model_config = ConfigDict(extra="forbid")

    weight: FiniteWeight = Field(1.0, description="Multiplier of this reward's score in the total.")


class RewardFunctionSettings(WeightedReward):
    max_concurrency: int = Field(
        DEFAULT_MAX_CONCURRENCY,
        ge=1,
        le=MAX_CONCURRENCY_LIMIT,
        description="Samples of a per-sample function scored at once: `async def` functions "
        "are awaited together, plain ones run in threads once a sample proves slow (an API "
        "call). 1 scores them one after another (code that is not thread-safe).",
    )
    sample_timeout_s: float | None = Field(
        None,
        gt=0,
        le=3600,
        description="Wall limit of one sample (per-sample functions); a slow sample loses only "
        "its own score. null: the server's default (RFT_REWARD_SAMPLE_TIMEOUT_S).",
    )
    rate_limit_per_s: float | None = Field(
        None,
        gt=0,
        le=100_000,
        description="At most this many calls start per second (samples of a per-sample "
        "function, calls of a batch one): keeps a judge API under its quota.",
    )

    def config_entry(self, version: int) -> dict[str, Any]:
        """The function's entry in a stored config version; run settings only when set."""
        entry: dict[str, Any] = {"version": version, "weight": self.weight}
        entry.update(self.model_dump(include=set(FUNCTION_RUN_SETTINGS), exclude_defaults=True))
        return entry


def run_settings(entry: dict[str, Any]) -> dict[str, Any]:
    """RewardFunctionSpec keywords from a stored config entry (older entries have none)."""
    return {key: entry[key] for key in FUNCTION_RUN_SETTINGS if entry.get(key) is not None}


def reward_model_settings(entry: dict[str, Any]) -> dict[str, Any]:
    """A reward model's settings from its stored config entry (those left unset are absent)."""
    return {key: entry[key] for key in REWARD_MODEL_SETTINGS if entry.get(key) is not None}


class RewardModelSettings(WeightedReward):
    batch_size: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="Texts per forward pass of the reward model (each rank scores its own "
        "share of a step's completions); null: 16.",
    )
    max_length: int | None = Field(
        None,
        ge=1,
        le=1_048_576,
        description="Tokens the reward model reads per text (prompt and completion, with the "
        "chat template), keeping the end; null: the whole text, as TRL.",
    )

    def config_entry(self, version: int) -> dict[str, Any]:
        """The entry in a stored config version; settings only when set."""
        entry: dict[str, Any] = {"version": version, "weight": self.weight}
        entry.update(self.model_dump(include=set(REWARD_MODEL_SETTINGS), exclude_none=True))
        return entry


class RewardModelCreate(RewardModelSettings):
    """A reward scored by a sequence-classification model instead of code."""

    model: str = Field(
        min_length=1,
        max_length=MAX_MODEL_NAME_CHARS,
        description="A sequence-classification model with one label (num_labels 1): a Hugging "
        "Face model id (checked on the hub), an absolute path on the workers under "
        "RFT_MODEL_ROOTS, or 'rft-tiny-reward' (built in: it prefers text written with the "
        "letter a). The workers score with it on the training device, as TRL scores a reward "
        "model.",
    )


class RewardFunctionCreate(RewardFunctionSettings):
    source: str = Field(
        description="Python source defining the function: per sample "
        "`def f(prompt, completion, example) -> float`, or TRL's batch form "
        "`def f(prompts, completions, **kwargs) -> list[float]`; `async def` too.",
        max_length=MAX_SOURCE_BYTES,
    )
    function: str | None = Field(
        None,
        description="With a whole module as `source` (imports, constants, helpers, several "
        "functions): the function to run. Only it and the module-level names it reaches are "
        "kept (and stored as this function's source).",
        max_length=200,
    )

    @model_validator(mode="after")
    def _take_function_from_module(self) -> RewardFunctionCreate:
        if self.function is None:
            return self
        try:
            self.source = extract_reward_function(self.function, self.source, self.function)
        except RewardCodeError as exc:
            if "syntax error" in exc.message:
                return self  # the source checks report it as for any function (400, the line)
            raise ValueError(str(exc)) from None
        return self


class RewardModuleFunction(RewardFunctionSettings):
    function: str | None = Field(
        None, description="The function in the module; default: the reward's own name."
    )


class RewardModule(BaseModel):
    """A whole reward file and which of its functions are rewards."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(description="The module's source.", max_length=MAX_SOURCE_BYTES)
    functions: dict[str, RewardModuleFunction] = Field(
        min_length=1, description="Reward name -> weight and settings; the name is the def's."
    )

    def function_entries(self) -> dict[str, dict[str, Any]]:
        """The module's rewards as reward_functions entries: the module and the def to run."""
        return {
            name: {
                "source": self.source,
                "function": entry.function or name,
                **entry.model_dump(exclude={"function"}, exclude_defaults=True),
            }
            for name, entry in self.functions.items()
        }


def reward_entry_kind(entry: Any) -> str | None:
    """Which kind of reward entry ``entry`` is: "code" (a source) or "model"; None when it
    gives both or neither (pydantic then refuses it with REWARD_ENTRY_ERROR)."""
    if isinstance(entry, RewardModelCreate):
        return REWARD_MODEL_FORM
    if isinstance(entry, RewardFunctionCreate):
        return "code"
    if not isinstance(entry, Mapping):
        return "code"  # the function schema words the error
    has_source = entry.get("source") is not None
    has_model = entry.get("model") is not None
    if has_source == has_model:
        return None
    return REWARD_MODEL_FORM if has_model else "code"


REWARD_ENTRY_ERROR = (
    "a reward entry gives either source (Python code, with optional function) or model (a "
    "reward model): exactly one of them"
)


def reward_entry_discriminator() -> Discriminator:
    return Discriminator(
        reward_entry_kind,
        custom_error_type="reward_entry",
        custom_error_message=REWARD_ENTRY_ERROR,
    )


# One entry of reward_functions: code, or a reward model.
RewardEntry = Annotated[
    Annotated[RewardFunctionCreate, Tag("code")]
    | Annotated[RewardModelCreate, Tag(REWARD_MODEL_FORM)],
    reward_entry_discriminator(),
]
Entry = TypeVar("Entry")


def code_entries(entries: Mapping[str, Any]) -> dict[str, RewardFunctionCreate]:
    """The entries that are code (reward functions), in order."""
    return {n: e for n, e in entries.items() if isinstance(e, RewardFunctionCreate)}


def model_entries(entries: Mapping[str, Any]) -> dict[str, RewardModelCreate]:
    """The entries that name reward models, in order."""
    return {n: e for n, e in entries.items() if isinstance(e, RewardModelCreate)}


def stored_source(entry: RewardFunctionCreate | RewardModelCreate) -> str:
    """What a function version stores as its source: the code, or the reward model."""
    return entry.model if isinstance(entry, RewardModelCreate) else entry.source


def check_reward_function_names(functions: dict[str, Entry]) -> dict[str, Entry]:
    if not functions:
        raise ValueError("give at least one reward function")
    return check_reward_function_count(functions)


def check_reward_function_count(functions: dict[str, Entry]) -> dict[str, Entry]:
    """The names and how many, but none is allowed: agent jobs whose environments score the
    rollouts need no function (their models check that one is given otherwise)."""
    return check_identifier_names(functions, what="reward function", most=MAX_REWARD_FUNCTIONS)


def check_identifier_names(entries: Named, *, what: str, most: int) -> Named:
    """At most ``most`` entries, each named by an identifier (how code refers to them)."""
    if len(entries) > most:
        raise ValueError(f"at most {most} {what}s")
    for name in entries:
        if not FUNCTION_NAME.match(name):
            raise ValueError(f"{what} name {name!r} must be an identifier of at most 64 characters")
    return entries


# A job's functions (and reward models) by name, as tests take them.
RewardFunctions = Annotated[dict[str, RewardEntry], AfterValidator(check_reward_function_names)]


# At least one reward function, from either field (what check_reward_function_names
# enforces once the module's functions are added), for the OpenAPI document.
ONE_REWARD_FUNCTION_GIVEN: list[Any] = [
    {"required": ["reward_module"]},
    {
        "required": ["reward_functions"],
        "properties": {"reward_functions": {"minProperties": 1}},
    },
]


class RewardModuleInput(BaseModel):
    """A request's optional reward_module, whose functions join its reward_functions."""

    model_config = ConfigDict(json_schema_extra={"anyOf": ONE_REWARD_FUNCTION_GIVEN})

    reward_module: RewardModule | None = Field(
        None,
        description="One module's source and which of its functions are rewards, beside or "
        "instead of reward_functions; each is stored as its own function with the "
        "module-level code it uses.",
    )

    @model_validator(mode="before")
    @classmethod
    def _add_module_functions(cls, data: Any) -> Any:
        return with_module_functions(data)


class RewardFunctionsInput(RewardModuleInput):
    """Reward functions one by one, from a module, or both (names must not repeat)."""

    reward_functions: RewardFunctions = Field(
        description="Functions by name, each with its own source or naming a reward model "
        "(may be left out, or empty, when reward_module names the functions)."
    )


def with_module_functions(data: Any) -> Any:
    """A request body with its reward_module's functions added to its reward_functions, as
    ``{"source": <the module>, "function": <the def>, ...}`` entries, before validation."""
    if not isinstance(data, dict) or data.get("reward_module") is None:
        return data
    module = RewardModule.model_validate(data["reward_module"])
    functions = data.get("reward_functions") or {}
    if not isinstance(functions, dict):
        return data  # the field's own validation words the error
    both = sorted(set(functions) & set(module.functions))
    if both:
        raise ValueError(
            f"reward function {both[0]!r} is given in reward_functions and in reward_module; "
            "give it once"
        )
    return {**data, "reward_functions": {**functions, **module.function_entries()}}


class Sample(BaseModel):
    prompt: str | list[dict[str, Any]]
    completion: str
    example: dict[str, Any] = Field(
        default_factory=dict, description="The dataset row; the prompt is added when missing."
    )


class RewardFunctionTest(RewardFunctionsInput):
    """Functions to try, on given samples or on rows of a stored dataset."""

    model_config = ConfigDict(extra="forbid")

    samples: list[Sample] | None = Field(None, max_length=MAX_TEST_SAMPLES)
    dataset_id: str | None = None
    completions: list[str] | None = Field(
        None,
        max_length=MAX_TEST_SAMPLES,
        description="With dataset_id: completions to score, paired with the dataset's rows in "
        "order (repeating the rows when there are more completions).",
    )
    rows: int = Field(4, ge=1, le=MAX_TEST_SAMPLES, description="Dataset rows to use.")
    allow_network: bool = Field(
        False,
        description="As a job's: HTTP(S) to public hosts only, through the egress proxy.",
    )
    secrets: JobSecrets = Field(
        default_factory=dict, description="Environment for the functions, as a job's secrets."
    )
    runtime_packages: list[str] = Field(
        default_factory=list,
        max_length=MAX_RUNTIME_PACKAGES,
        description="Extra pip requirements for the functions, as a job's (e.g. 'pytest' for "
        "a reward that runs tests): installed once per list on the API server, then reused. "
        "A package that cannot be installed is a 400 quoting pip.",
    )

    @field_validator("runtime_packages")
    @classmethod
    def _plain_requirements(cls, packages: list[str]) -> list[str]:
        return plain_requirements(packages)

    @model_validator(mode="after")
    def _one_source_of_samples(self) -> RewardFunctionTest:
        if (self.samples is None) == (self.dataset_id is None):
            raise ValueError("give either samples or dataset_id")
        if self.samples is not None and not self.samples:
            raise ValueError("samples is empty")
        return self


class RewardErrorOut(BaseModel):
    kind: str
    message: str
    traceback: str | None
    sample_index: int | None


class FunctionTestResult(BaseModel):
    form: str = Field(
        description="sample or batch: how a function is called; model: a reward model "
        "(checked, not run: its scores are null)."
    )
    scores: list[float | None]
    errors: list[RewardErrorOut]
    error_rate: float
    logs: str
    logs_truncated: bool
    duration_s: float


class RewardFunctionTestResult(BaseModel):
    samples: list[Sample]
    results: dict[str, FunctionTestResult]
    totals: list[float | None] = Field(
        description="Weighted sum per sample, as in training, of the functions that ran."
    )
    not_scored: list[str] = Field(
        default_factory=list,
        description="Reward models among the entries: checked (the model exists and is a "
        "sequence classifier with one label) but not run, since the API has no model runtime; "
        "their scores are null and left out of totals. Training scores them on the workers.",
    )
