"""Dataset rows as supervised fine-tuning (SFT) examples, in the shapes TRL's SFTTrainer reads.

A row teaches by example in one of three shapes:

- ``{"messages": [...]}``: a conversation whose last message is the assistant's (the whole
  conversation is trained on, as TRL does for conversational language modeling);
- ``{"prompt": ..., "completion": ...}``: text and text, or chat messages and the assistant's
  answer (a string, or a list of assistant messages); only the completion is trained on;
- ``{"prompt": [...]}`` whose last message is the assistant's: a conversation, as an
  OpenAI chat-format file stores it (its ``messages`` become the row's prompt).

Every row of a job must have the same shape. The API checks a dataset this way when an SFT job
is created (400 naming the row); the worker builds its training examples with the same code.

Tool use is taught the same way (OpenAI's chat fine-tuning format, TRL's): an assistant message
may carry ``tool_calls`` (``[{"type": "function", "function": {"name", "arguments"}}]``,
``arguments`` an object or its JSON text; its ``content`` may then be empty or null), ``tool``
messages answer them, a chat completion may hold them between its assistant turns, and a row's
``tools`` (a list of ``{"type": "function", "function": {"name", "description",
"parameters"}}``, or its JSON text) is rendered into the prompt by the chat template, as an
agent job renders its tools. Every call of a job should pass the same argument names: the rows
become one table whose missing fields are null.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from service.datasets.parsing import check_messages
from service.errors import InvalidDataset

SftShape = Literal["conversation", "text prompt-completion", "chat prompt-completion"]
ASSISTANT = "assistant"


class NotAnSftExample(ValueError):
    """A row that cannot be trained on by example; the message names the row and the fix."""


def sft_examples(rows: Sequence[dict[str, Any]], *, what: str = "row") -> list[dict[str, Any]]:
    """Each row as an SFTTrainer example (``{"messages"}`` or ``{"prompt", "completion"}``);
    raises NotAnSftExample naming the first row that is not one, or whose shape differs from
    the first row's (``what`` names the rows in messages: "row", "validation row")."""
    examples = []
    first: SftShape | None = None
    for index, row in enumerate(rows):
        where = f"{what} {index + 1}"
        example, shape = sft_example(row, where)
        if "tools" in row:
            example["tools"] = _tools(row["tools"], f"{where}: 'tools'")
        if first is None:
            first = shape
        elif shape != first:
            raise NotAnSftExample(
                f"{where} is a {shape} example, and {what} 1 a {first} one: every row of an "
                "SFT dataset must have the same shape"
            )
        examples.append(example)
    return examples


def sft_example(row: dict[str, Any], where: str = "row") -> tuple[dict[str, Any], SftShape]:
    if "messages" in row:
        messages = _messages(row["messages"], f"{where}: 'messages'")
        _ends_with_assistant(messages, f"{where}: 'messages'")
        return {"messages": messages}, "conversation"
    prompt = row.get("prompt")
    if "completion" in row:
        completion = row["completion"]
        if isinstance(prompt, str):
            if not isinstance(completion, str) or not completion:
                raise NotAnSftExample(
                    f"{where}: a text prompt needs a non-empty text 'completion', got "
                    f"{_kind(completion)}"
                )
            return {"prompt": prompt, "completion": completion}, "text prompt-completion"
        prompt_messages = _messages(prompt, f"{where}: 'prompt'")
        if isinstance(completion, str) and completion:
            answer = [{"role": ASSISTANT, "content": completion}]
        else:
            answer = _messages(completion, f"{where}: 'completion'")
            wrong = next((m["role"] for m in answer if m["role"] not in _COMPLETION_ROLES), None)
            if wrong is not None:
                raise NotAnSftExample(
                    f"{where}: 'completion' holds a {wrong!r} message; a completion is the "
                    "assistant's answer (with the 'tool' messages answering its tool calls)"
                )
            _ends_with_assistant(answer, f"{where}: 'completion'")
        return {"prompt": prompt_messages, "completion": answer}, "chat prompt-completion"
    if isinstance(prompt, list) and prompt and _role(prompt[-1]) == ASSISTANT:
        return {"messages": _messages(prompt, f"{where}: 'prompt'")}, "conversation"
    raise NotAnSftExample(
        f"{where}: nothing to learn from: an SFT row is {{'messages': [...]}} ending with an "
        "assistant message, or {'prompt': ..., 'completion': ...}"
    )


# A completion's turns: the assistant's, and the tool results its calls got in between.
_COMPLETION_ROLES = frozenset({ASSISTANT, "tool"})


def _messages(value: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise NotAnSftExample(
            f"{where} must be a non-empty list of chat messages, got {_kind(value)}"
        )
    # A tool-calling turn may say nothing (OpenAI's format sends its content as null).
    value = [
        {**message, "content": ""}
        if isinstance(message, dict)
        and message.get("content") is None
        and message.get("tool_calls")
        else message
        for message in value
    ]
    try:
        check_messages(value, where, "messages")
    except InvalidDataset as exc:
        raise NotAnSftExample(exc.detail) from None
    # Only what the chat template reads: other keys (a message's "weight", say) would become
    # Arrow columns that must agree across rows.
    return [_message(message, f"{where}: message {index}") for index, message in enumerate(value)]


def _message(message: dict[str, Any], where: str) -> dict[str, Any]:
    kept = {"role": message["role"], "content": message["content"]}
    calls = message.get("tool_calls")
    if calls is not None:
        if message["role"] != ASSISTANT:
            raise NotAnSftExample(f"{where}: only an assistant message may have 'tool_calls'")
        if not isinstance(calls, list) or not calls:
            raise NotAnSftExample(f"{where}: 'tool_calls' must be a non-empty list")
        kept["tool_calls"] = [
            _tool_call(call, f"{where}, tool call {n}") for n, call in enumerate(calls)
        ]
    if message["role"] == "tool" and isinstance(message.get("name"), str):
        kept["name"] = message["name"]
    return kept


def _tool_call(call: Any, where: str) -> dict[str, Any]:
    """``{"type": "function", "function": {"name", "arguments"}}`` with the arguments as an
    object (the chat templates write them as JSON themselves)."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise NotAnSftExample(
            f'{where} must be {{"type": "function", "function": {{"name": ..., "arguments": '
            "{...}}}"
        )
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            raise NotAnSftExample(f"{where}: 'arguments' is not valid JSON") from None
    if not isinstance(arguments, dict):
        raise NotAnSftExample(f"{where}: 'arguments' must be an object, got {_kind(arguments)}")
    return {"type": "function", "function": {"name": function["name"], "arguments": arguments}}


def _tools(value: Any, where: str) -> str:
    """The row's tool schemas as JSON text: TRL reads it so, and a table of schemas whose
    parameters differ between rows would otherwise fill them with nulls."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise NotAnSftExample(f"{where} is not valid JSON") from None
    if not isinstance(value, list) or not all(
        isinstance(tool, dict)
        and isinstance(tool.get("function"), dict)
        and isinstance(tool["function"].get("name"), str)
        for tool in value
    ):
        raise NotAnSftExample(
            f'{where} must be a list of {{"type": "function", "function": {{"name": ..., '
            '"description": ..., "parameters": {...}}} tool schemas'
        )
    return json.dumps(value)


def _ends_with_assistant(messages: list[dict[str, Any]], where: str) -> None:
    if messages[-1]["role"] != ASSISTANT:
        raise NotAnSftExample(
            f"{where} ends with a {messages[-1]['role']!r} message: the last message must be "
            "the assistant's, the answer to learn"
        )


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else None


def _kind(value: Any) -> str:
    if isinstance(value, str):
        return "an empty string" if not value else "a string"
    if isinstance(value, list):
        return "an empty list" if not value else "a list"
    return "null" if value is None else type(value).__name__
