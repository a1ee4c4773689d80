from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from rft.models.exports import HubPush
from service.exports.status import ExportStage, ExportStatus
from service.parameters import INT32_MAX
from service.secrets import SECRET_NAME

ExportKind = Literal["merged", "adapter"]
# "auto": the base model's own dtype (its config's torch_dtype), as it was trained on.
ExportDtype = Literal["auto", "float32", "bfloat16", "float16"]
# A hub repository id: a user or organization, a slash and a name (the hub's own rules).
HUB_REPO_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$"


class HubDestination(BaseModel):
    """A Hugging Face hub model repository, created when missing, written with the user's
    token: the name of one of the job's secrets, or the token itself (kept encrypted until the
    push ends, then erased; never shown)."""

    model_config = ConfigDict(extra="forbid")

    repo_id: str = Field(pattern=HUB_REPO_ID, description="e.g. 'my-org/my-model'.")
    private: bool = Field(True, description="Create the repository private (when it is new).")
    token_secret: str | None = Field(
        None,
        pattern=SECRET_NAME.pattern,
        description="The name of the job secret that holds a hub token with write access.",
    )
    token: SecretStr | None = Field(
        None,
        min_length=1,
        max_length=1000,
        description="A hub token with write access, for this push only (write-only: sealed at "
        "rest, erased when the push ends).",
    )

    @model_validator(mode="after")
    def _one_token(self) -> HubDestination:
        if (self.token_secret is None) == (self.token is None):
            raise ValueError("give the hub token as exactly one of token_secret or token")
        return self


class ExportCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: ExportKind = Field(
        "merged",
        description="'merged': the base model with the adapter merged into its weights (a "
        "Hugging Face model folder in safetensors); 'adapter': the LoRA adapter as it is "
        "(for a hub push; it downloads as adapter.tar.gz).",
    )
    checkpoint_step: int | None = Field(
        None, ge=0, le=INT32_MAX, description="A checkpoint's adapter; null: the final adapter."
    )
    dtype: ExportDtype = Field(
        "auto",
        description="The merged weights' dtype; 'auto' keeps the base model's (merged only).",
    )
    hub: HubDestination | None = Field(
        None, description="Push to this hub repository; null keeps a merged archive to download."
    )

    @model_validator(mode="after")
    def _adapter_goes_to_the_hub(self) -> ExportCreate:
        if self.kind == "adapter" and self.hub is None:
            raise ValueError(
                "an adapter export needs a hub destination: the adapter itself downloads as "
                "GET /v1/jobs/{job_id}/adapter.tar.gz"
            )
        if self.kind == "adapter" and self.dtype != "auto":
            raise ValueError("dtype applies to merged exports only; an adapter ships as trained")
        return self


class Export(BaseModel):
    id: str
    job_id: str
    kind: ExportKind
    checkpoint_step: int | None
    dtype: ExportDtype
    hub: HubPush | None
    status: ExportStatus
    stage: ExportStage | None = Field(None, description="What a running export is doing.")
    progress: float = Field(description="Share done, 0 to 1.")
    failure_reason: str | None
    size_bytes: int | None = Field(None, description="The archive's size, once built.")
    download_path: str | None = Field(
        None, description="Where the merged archive downloads from (merged archives only)."
    )
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class ExportList(BaseModel):
    data: list[Export]
