"""Chat and text completions as the server returns them (OpenAI's shapes).

Named apart from :class:`rft.Completion`, which is a completion recorded during training.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Usage(BaseModel):
    model_config = ConfigDict(extra="allow")

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletionMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | None


class ChatCompletionChoice(BaseModel):
    model_config = ConfigDict(extra="allow")

    index: int
    message: ChatCompletionMessage
    finish_reason: str
    logprobs: Any = None


class ChatCompletion(BaseModel):
    """``choices[0].message.content`` is the answer, as with openai's client."""

    model_config = ConfigDict(extra="allow")

    id: str
    object: str
    created: int
    model: str
    choices: list[ChatCompletionChoice]
    usage: Usage


class TextCompletionChoice(BaseModel):
    model_config = ConfigDict(extra="allow")

    index: int
    text: str
    finish_reason: str
    logprobs: Any = None


class TextCompletion(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str
    object: str
    created: int
    model: str
    choices: list[TextCompletionChoice]
    usage: Usage


class ChoiceDelta(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str | None = None
    content: str | None = None


class ChatCompletionChunkChoice(BaseModel):
    model_config = ConfigDict(extra="allow")

    index: int
    delta: ChoiceDelta
    finish_reason: str | None = None


class ChatCompletionChunk(BaseModel):
    """One streamed piece: ``choices[0].delta.content`` is the new text (the last chunk of a
    stream with ``include_usage`` has no choices, only ``usage``)."""

    model_config = ConfigDict(extra="allow")

    id: str
    object: str
    created: int
    model: str
    choices: list[ChatCompletionChunkChoice]
    usage: Usage | None = None


class TextCompletionChunkChoice(BaseModel):
    model_config = ConfigDict(extra="allow")

    index: int
    text: str
    finish_reason: str | None = None


class TextCompletionChunk(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str
    object: str
    created: int
    model: str
    choices: list[TextCompletionChunkChoice]
    usage: Usage | None = None
