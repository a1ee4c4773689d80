"""OpenAI's chat and text completion shapes (the fields the `openai` package sends and reads).

Requests ignore fields we do not use (OpenAI clients send e.g. ``user``), so code written for
OpenAI runs unchanged; the fields we do use are bounded, so an absurd request is a 422 naming
the field, never a long-running generation.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_CHOICES = 16
MAX_MESSAGES = 256
MAX_STOP_SEQUENCES = 4
MAX_PROMPT_CHARS = 200_000


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    include_usage: bool = Field(False, description="A last chunk carries the usage.")


class SamplingParameters(BaseModel):
    """What both endpoints share."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(
        min_length=1,
        max_length=300,
        description="A base model ('rft-tiny', a hub id), a job id (its final adapter), or "
        "'<job id>:checkpoint-<step>'.",
    )
    temperature: float = Field(1.0, ge=0, le=2, description="0: greedy (deterministic).")
    top_p: float = Field(1.0, gt=0, le=1)
    n: int = Field(1, ge=1, le=MAX_CHOICES, description="Completions per request.")
    seed: int | None = Field(None, ge=0, le=2**32 - 1, description="Repeatable sampling.")
    stop: str | list[str] | None = Field(
        None, description=f"Up to {MAX_STOP_SEQUENCES} strings that end a completion."
    )
    stream: bool = Field(
        False, description="Server-sent events as OpenAI streams them (one choice: n=1)."
    )
    stream_options: StreamOptions | None = None

    @field_validator("stop")
    @classmethod
    def _few_stop_sequences(cls, stop: str | list[str] | None) -> str | list[str] | None:
        if isinstance(stop, list) and len(stop) > MAX_STOP_SEQUENCES:
            raise ValueError(f"at most {MAX_STOP_SEQUENCES} stop sequences")
        return stop

    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class ChatCompletionCreate(SamplingParameters):
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    max_tokens: int | None = Field(None, ge=1, description="Default 256.")
    max_completion_tokens: int | None = Field(
        None, ge=1, description="OpenAI's newer name for max_tokens; either may be given."
    )


class CompletionCreate(SamplingParameters):
    prompt: str | list[str] = Field(description="One prompt (a list holding one is accepted).")
    max_tokens: int | None = Field(None, ge=1, description="Default 16, as OpenAI's.")

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, prompt: str | list[str]) -> str | list[str]:
        if isinstance(prompt, list) and len(prompt) != 1:
            raise ValueError("give one prompt (a string, or a list holding one string)")
        text = prompt if isinstance(prompt, str) else prompt[0]
        if len(text) > MAX_PROMPT_CHARS:
            raise ValueError(f"the prompt is longer than {MAX_PROMPT_CHARS} characters")
        return prompt

    def prompt_text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: Literal["stop", "length"]
    logprobs: Any = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class CompletionChoice(BaseModel):
    index: int
    text: str
    finish_reason: Literal["stop", "length"]
    logprobs: Any = None


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage
