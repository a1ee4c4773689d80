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
"""

from __future__ import annotations

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
            wrong = next((m["role"] for m in answer if m["role"] != ASSISTANT), None)
            if wrong is not None:
                raise NotAnSftExample(
                    f"{where}: 'completion' holds a {wrong!r} message; a completion is the "
                    "assistant's answer"
                )
        return {"prompt": prompt_messages, "completion": answer}, "chat prompt-completion"
    if isinstance(prompt, list) and prompt and _role(prompt[-1]) == ASSISTANT:
        return {"messages": _messages(prompt, f"{where}: 'prompt'")}, "conversation"
    raise NotAnSftExample(
        f"{where}: nothing to learn from: an SFT row is {{'messages': [...]}} ending with an "
        "assistant message, or {'prompt': ..., 'completion': ...}"
    )


def _messages(value: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise NotAnSftExample(
            f"{where} must be a non-empty list of chat messages, got {_kind(value)}"
        )
    try:
        check_messages(value, where, "messages")
    except InvalidDataset as exc:
        raise NotAnSftExample(exc.detail) from None
    # Only what the chat template reads: other keys (a message's "weight", say) would become
    # Arrow columns that must agree across rows.
    return [{"role": message["role"], "content": message["content"]} for message in value]


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
