"""OpenAI's grader objects (openai.types.graders), as the request bodies that carry them.

Field names and type tags are OpenAI's; unknown fields are kept out (``extra="forbid"``)
only where OpenAI itself documents none.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_GRADER_SOURCE_BYTES = 100_000


class GraderBase(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(
        "",
        max_length=64,
        description="OpenAI requires it; code that leaves it out gets the grader's type.",
    )

    @model_validator(mode="after")
    def _named(self) -> GraderBase:
        if not self.name:
            self.name = str(getattr(self, "type", "grader"))
        return self


class StringCheckGrader(GraderBase):
    type: Literal["string_check"]
    input: str
    reference: str
    operation: Literal["eq", "ne", "like", "ilike"]


TextSimilarityMetric = Literal[
    "cosine",
    "fuzzy_match",
    "bleu",
    "gleu",
    "meteor",
    "rouge_1",
    "rouge_2",
    "rouge_3",
    "rouge_4",
    "rouge_5",
    "rouge_l",
]


class TextSimilarityGrader(GraderBase):
    type: Literal["text_similarity"]
    input: str
    reference: str
    evaluation_metric: TextSimilarityMetric


class PythonGrader(GraderBase):
    type: Literal["python"]
    source: str = Field(max_length=MAX_GRADER_SOURCE_BYTES)
    image_tag: str | None = None


class ModelGraderInput(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["user", "assistant", "system", "developer"]
    content: str | dict[str, Any] | list[Any]
    type: Literal["message"] | None = None


class SamplingParams(BaseModel):
    model_config = ConfigDict(extra="allow")

    max_completions_tokens: int | None = None
    reasoning_effort: str | None = None
    seed: int | None = None
    temperature: float | None = None
    top_p: float | None = None


class ScoreModelGrader(GraderBase):
    type: Literal["score_model"]
    input: list[ModelGraderInput] = Field(min_length=1)
    model: str
    range: list[float] | None = Field(None, min_length=2, max_length=2)
    sampling_params: SamplingParams | None = None


class LabelModelGrader(GraderBase):
    type: Literal["label_model"]
    input: list[ModelGraderInput] = Field(min_length=1)
    model: str
    labels: list[str] = Field(min_length=1)
    passing_labels: list[str] = Field(min_length=1)


class EndpointGrader(GraderBase):
    """Ours, not OpenAI's: the rollout is POSTed to the user's endpoint, which answers
    ``{"score": <number>}`` (docs/migrate-from-openai.md)."""

    type: Literal["endpoint"]
    url: str = Field(max_length=2000, description="https:// URL the rollout is POSTed to.")
    headers: dict[str, str] = Field(
        default_factory=dict,
        max_length=32,
        description="Sent with every POST; `{{secrets.NAME}}` is the job's secret NAME.",
    )
    timeout_s: float = Field(10.0, gt=0, le=600, description="Wall limit of one try.")
    max_retries: int = Field(
        2, ge=0, le=5, description="Tries again after a 5xx or a failed connection."
    )


SingleGrader = Annotated[
    StringCheckGrader
    | TextSimilarityGrader
    | PythonGrader
    | ScoreModelGrader
    | LabelModelGrader
    | EndpointGrader,
    Field(discriminator="type"),
]


class MultiGrader(GraderBase):
    type: Literal["multi"]
    calculate_output: str = Field(min_length=1, max_length=2000)
    graders: dict[str, SingleGrader] | SingleGrader = Field(
        description="Named graders (OpenAI's documented form), or one grader named by its name "
        "(the typed client's form)."
    )


Grader = Annotated[
    StringCheckGrader
    | TextSimilarityGrader
    | PythonGrader
    | ScoreModelGrader
    | LabelModelGrader
    | EndpointGrader
    | MultiGrader,
    Field(discriminator="type"),
]


class GraderRunRequest(BaseModel):
    grader: Grader
    model_sample: str
    item: Any = None


class GraderValidateRequest(BaseModel):
    grader: Grader


class GraderValidateResponse(BaseModel):
    grader: Grader | None = None


class GraderRunErrors(BaseModel):
    formula_parse_error: bool = False
    invalid_variable_error: bool = False
    model_grader_parse_error: bool = False
    model_grader_refusal_error: bool = False
    model_grader_server_error: bool = False
    model_grader_server_error_details: str | None = None
    other_error: bool = False
    python_grader_runtime_error: bool = False
    python_grader_runtime_error_details: str | None = None
    python_grader_server_error: bool = False
    python_grader_server_error_type: str | None = None
    sample_parse_error: bool = False
    truncated_observation_error: bool = False
    unresponsive_reward_error: bool = False


class GraderRunMetadata(BaseModel):
    errors: GraderRunErrors
    execution_time: float
    name: str
    sampled_model_name: str | None = None
    scores: dict[str, Any]
    token_usage: int | None = None
    type: str


class GraderRunResponse(BaseModel):
    metadata: GraderRunMetadata
    model_grader_token_usage_per_model: dict[str, Any]
    reward: float
    sub_rewards: dict[str, Any]
