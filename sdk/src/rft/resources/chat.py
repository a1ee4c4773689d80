"""``client.chat.completions.create(...)`` and ``client.completions.create(...)``, shaped like
openai's client, so code written for it moves over by changing the import.

``model`` is a base model (``"rft-tiny"``, a hub id), a job id (its final adapter) or
``"<job id>:checkpoint-<step>"``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rft.chat import ChatCompletion, TextCompletion
from rft.transport import AsyncTransport, RequestOptions, SyncTransport


def _sampling(
    model: str,
    max_tokens: int | None,
    temperature: float | None,
    top_p: float | None,
    n: int | None,
    seed: int | None,
    stop: str | Sequence[str] | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model}
    for name, value in (
        ("max_tokens", max_tokens),
        ("temperature", temperature),
        ("top_p", top_p),
        ("n", n),
        ("seed", seed),
    ):
        if value is not None:
            body[name] = value
    if stop is not None:
        body["stop"] = stop if isinstance(stop, str) else list(stop)
    return body


def _chat_request(messages: Sequence[Mapping[str, Any]], body: dict[str, Any]) -> RequestOptions:
    body["messages"] = [dict(message) for message in messages]
    return RequestOptions("POST", "/v1/chat/completions", json=body)


def _text_request(prompt: str, body: dict[str, Any]) -> RequestOptions:
    body["prompt"] = prompt
    return RequestOptions("POST", "/v1/completions", json=body)


class ChatCompletions:
    def __init__(self, transport: SyncTransport) -> None:
        self._transport = transport

    def create(
        self,
        *,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        n: int | None = None,
        seed: int | None = None,
        stop: str | Sequence[str] | None = None,
    ) -> ChatCompletion:
        """One chat turn; ``temperature=0`` decodes greedily (the same answer every time)."""
        body = _sampling(model, max_tokens, temperature, top_p, n, seed, stop)
        response = self._transport.request(_chat_request(messages, body))
        return ChatCompletion.model_validate(response.json())


class Chat:
    def __init__(self, transport: SyncTransport) -> None:
        self.completions = ChatCompletions(transport)


class Completions:
    def __init__(self, transport: SyncTransport) -> None:
        self._transport = transport

    def create(
        self,
        *,
        model: str,
        prompt: str,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        n: int | None = None,
        seed: int | None = None,
        stop: str | Sequence[str] | None = None,
    ) -> TextCompletion:
        """A raw continuation of ``prompt`` (no chat template)."""
        body = _sampling(model, max_tokens, temperature, top_p, n, seed, stop)
        response = self._transport.request(_text_request(prompt, body))
        return TextCompletion.model_validate(response.json())


class AsyncChatCompletions:
    def __init__(self, transport: AsyncTransport) -> None:
        self._transport = transport

    async def create(
        self,
        *,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        n: int | None = None,
        seed: int | None = None,
        stop: str | Sequence[str] | None = None,
    ) -> ChatCompletion:
        body = _sampling(model, max_tokens, temperature, top_p, n, seed, stop)
        response = await self._transport.request(_chat_request(messages, body))
        return ChatCompletion.model_validate(response.json())


class AsyncChat:
    def __init__(self, transport: AsyncTransport) -> None:
        self.completions = AsyncChatCompletions(transport)


class AsyncCompletions:
    def __init__(self, transport: AsyncTransport) -> None:
        self._transport = transport

    async def create(
        self,
        *,
        model: str,
        prompt: str,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        n: int | None = None,
        seed: int | None = None,
        stop: str | Sequence[str] | None = None,
    ) -> TextCompletion:
        body = _sampling(model, max_tokens, temperature, top_p, n, seed, stop)
        response = await self._transport.request(_text_request(prompt, body))
        return TextCompletion.model_validate(response.json())
