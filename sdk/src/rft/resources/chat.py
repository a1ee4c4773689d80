"""``client.chat.completions.create(...)`` and ``client.completions.create(...)``, shaped like
openai's client, so code written for it moves over by changing the import.

``model`` is a base model (``"rft-tiny"``, the base model of one of your jobs), a job id (its
final adapter) or ``"<job id>:checkpoint-<step>"``. ``stream=True`` returns an iterator of
chunks instead of the whole answer; the request is sent (and refused, if it is) by ``create``
itself, as with openai's client.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeVar, overload

from pydantic import BaseModel

from rft.chat import ChatCompletion, ChatCompletionChunk, TextCompletion, TextCompletionChunk
from rft.sse import SSEDecoder
from rft.transport import AsyncTransport, RequestOptions, SyncTransport

Chunk = TypeVar("Chunk", bound=BaseModel)
STREAM_END = "[DONE]"


def _sampling(
    model: str,
    max_tokens: int | None,
    temperature: float | None,
    top_p: float | None,
    n: int | None,
    seed: int | None,
    stop: str | Sequence[str] | None,
    stream: bool,
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
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def _chat_request(messages: Sequence[Mapping[str, Any]], body: dict[str, Any]) -> RequestOptions:
    body["messages"] = [dict(message) for message in messages]
    return RequestOptions("POST", "/v1/chat/completions", json=body)


def _text_request(prompt: str, body: dict[str, Any]) -> RequestOptions:
    body["prompt"] = prompt
    return RequestOptions("POST", "/v1/completions", json=body)


def _chunks(decoder: SSEDecoder, data: bytes, model: type[Chunk]) -> tuple[list[Chunk], bool]:
    """The chunks ``data`` completes, and whether the stream's end marker came."""
    chunks: list[Chunk] = []
    for message in decoder.feed(data):
        if message.data == STREAM_END:
            return chunks, True
        chunks.append(model.model_validate(json.loads(message.data)))
    return chunks, False


def _open_stream(
    transport: SyncTransport, options: RequestOptions, model: type[Chunk]
) -> Iterator[Chunk]:
    exits = contextlib.ExitStack()
    response = exits.enter_context(transport.stream(options))  # raises here, not at iteration

    def read() -> Iterator[Chunk]:
        with exits:
            decoder = SSEDecoder()
            for data in response.iter_bytes():
                chunks, ended = _chunks(decoder, data, model)
                yield from chunks
                if ended:
                    return

    return read()


async def _open_async_stream(
    transport: AsyncTransport, options: RequestOptions, model: type[Chunk]
) -> AsyncIterator[Chunk]:
    exits = contextlib.AsyncExitStack()
    response = await exits.enter_async_context(transport.stream(options))

    async def read() -> AsyncIterator[Chunk]:
        async with exits:
            decoder = SSEDecoder()
            async for data in response.aiter_bytes():
                chunks, ended = _chunks(decoder, data, model)
                for chunk in chunks:
                    yield chunk
                if ended:
                    return

    return read()


class ChatCompletions:
    def __init__(self, transport: SyncTransport) -> None:
        self._transport = transport

    @overload
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
        stream: Literal[False] = False,
    ) -> ChatCompletion: ...

    @overload
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
        stream: Literal[True],
    ) -> Iterator[ChatCompletionChunk]: ...

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
        stream: bool = False,
    ) -> ChatCompletion | Iterator[ChatCompletionChunk]:
        """One chat turn; ``temperature=0`` decodes greedily (the same answer every time)."""
        body = _sampling(model, max_tokens, temperature, top_p, n, seed, stop, stream)
        options = _chat_request(messages, body)
        if stream:
            return _open_stream(self._transport, options, ChatCompletionChunk)
        return ChatCompletion.model_validate(self._transport.request(options).json())


class Chat:
    def __init__(self, transport: SyncTransport) -> None:
        self.completions = ChatCompletions(transport)


class Completions:
    def __init__(self, transport: SyncTransport) -> None:
        self._transport = transport

    @overload
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
        stream: Literal[False] = False,
    ) -> TextCompletion: ...

    @overload
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
        stream: Literal[True],
    ) -> Iterator[TextCompletionChunk]: ...

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
        stream: bool = False,
    ) -> TextCompletion | Iterator[TextCompletionChunk]:
        """A raw continuation of ``prompt`` (no chat template)."""
        body = _sampling(model, max_tokens, temperature, top_p, n, seed, stop, stream)
        options = _text_request(prompt, body)
        if stream:
            return _open_stream(self._transport, options, TextCompletionChunk)
        return TextCompletion.model_validate(self._transport.request(options).json())


class AsyncChatCompletions:
    def __init__(self, transport: AsyncTransport) -> None:
        self._transport = transport

    @overload
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
        stream: Literal[False] = False,
    ) -> ChatCompletion: ...

    @overload
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
        stream: Literal[True],
    ) -> AsyncIterator[ChatCompletionChunk]: ...

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
        stream: bool = False,
    ) -> ChatCompletion | AsyncIterator[ChatCompletionChunk]:
        body = _sampling(model, max_tokens, temperature, top_p, n, seed, stop, stream)
        options = _chat_request(messages, body)
        if stream:
            return await _open_async_stream(self._transport, options, ChatCompletionChunk)
        response = await self._transport.request(options)
        return ChatCompletion.model_validate(response.json())


class AsyncChat:
    def __init__(self, transport: AsyncTransport) -> None:
        self.completions = AsyncChatCompletions(transport)


class AsyncCompletions:
    def __init__(self, transport: AsyncTransport) -> None:
        self._transport = transport

    @overload
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
        stream: Literal[False] = False,
    ) -> TextCompletion: ...

    @overload
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
        stream: Literal[True],
    ) -> AsyncIterator[TextCompletionChunk]: ...

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
        stream: bool = False,
    ) -> TextCompletion | AsyncIterator[TextCompletionChunk]:
        body = _sampling(model, max_tokens, temperature, top_p, n, seed, stop, stream)
        options = _text_request(prompt, body)
        if stream:
            return await _open_async_stream(self._transport, options, TextCompletionChunk)
        response = await self._transport.request(options)
        return TextCompletion.model_validate(response.json())
