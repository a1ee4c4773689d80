"""What the API sends the inference server, and what comes back.

The API resolves a model name (tenant, job, checkpoint) into a base model and an adapter
location, so the inference server never sees tenants or the database: it loads what it is
told and generates. OpenAI's wire format is built on the API side (service.inference.service),
in one place, from these plain results.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class AdapterRef(BaseModel):
    """A LoRA adapter in the artifact store (a local folder or an s3:// prefix)."""

    uri: str = Field(description="Where the PEFT adapter folder lives.")
    full_model: bool = Field(
        False,
        description="The job trained every weight (adapter 'full'): uri is a whole model, "
        "served in place of its base model.",
    )


class GenerationRequest(BaseModel):
    base_model: str = Field(description="'rft-tiny', a hub id, or a path under RFT_MODEL_ROOTS.")
    adapter: AdapterRef | None = Field(None, description="None: the base model alone.")
    # Exactly one of the two: chat messages (the chat template applies) or a raw prompt.
    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    max_tokens: int
    temperature: float
    top_p: float
    n: int
    seed: int | None = None
    stop: list[str] = Field(default_factory=list)
    stream: bool = Field(
        False,
        description='Answer NDJSON lines as the text grows: {"delta": text} lines, then '
        '{"result": GenerationResult}. One choice only.',
    )


class GeneratedChoice(BaseModel):
    text: str
    finish_reason: Literal["stop", "length"]
    completion_tokens: int


class GenerationResult(BaseModel):
    choices: list[GeneratedChoice]
    prompt_tokens: int


class StreamLine(BaseModel):
    """One line of a streamed generation: a piece of text, or at the end the whole result."""

    delta: str | None = None
    result: GenerationResult | None = None
