"""SFT rows that teach tool use (service.datasets.supervised): tool calls, tool results and the
row's tool schemas become the example TRL's SFTTrainer renders; what cannot be rendered is
refused naming the row."""

from __future__ import annotations

import json
from typing import Any

import pytest

from service.datasets.supervised import NotAnSftExample, sft_examples

SCHEMA = {
    "type": "function",
    "function": {
        "name": "get_price",
        "description": "Get the price of an item.",
        "parameters": {
            "type": "object",
            "properties": {"item": {"type": "string", "description": "The item."}},
            "required": ["item"],
        },
    },
}


def tool_row(**changes: Any) -> dict[str, Any]:
    call = {"type": "function", "function": {"name": "get_price", "arguments": {"item": "lamp"}}}
    row: dict[str, Any] = {
        "prompt": [{"role": "user", "content": "How much is the lamp?"}],
        "completion": [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "name": "get_price", "content": "12"},
            {"role": "assistant", "content": "The lamp costs 12."},
        ],
        "tools": [SCHEMA],
    }
    return {**row, **changes}


def test_a_tool_transcript_keeps_its_calls_results_and_tools() -> None:
    [example] = sft_examples([tool_row()])
    assert example["prompt"] == [{"role": "user", "content": "How much is the lamp?"}]
    call, result, final = example["completion"]
    assert call["tool_calls"] == [
        {"type": "function", "function": {"name": "get_price", "arguments": {"item": "lamp"}}}
    ]
    assert result == {"role": "tool", "content": "12", "name": "get_price"}
    assert final == {"role": "assistant", "content": "The lamp costs 12."}
    # As JSON text (TRL parses it), so rows' schemas never merge into one table's columns.
    assert json.loads(example["tools"]) == [SCHEMA]


def test_openai_s_form_is_read_arguments_as_json_text_and_a_null_content() -> None:
    openai_call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_price", "arguments": '{"item": "lamp"}'},
    }
    row = tool_row(
        completion=[
            {"role": "assistant", "content": None, "tool_calls": [openai_call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "12"},
            {"role": "assistant", "content": "The lamp costs 12."},
        ],
        tools=json.dumps([SCHEMA]),
    )
    [example] = sft_examples([row])
    call = example["completion"][0]
    assert call["content"] == ""
    assert call["tool_calls"][0]["function"]["arguments"] == {"item": "lamp"}
    assert json.loads(example["tools"]) == [SCHEMA]


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        (
            {"completion": [{"role": "tool", "content": "12"}]},
            "'completion' ends with a 'tool' message",
        ),
        (
            {
                "completion": [
                    {"role": "user", "content": "and?"},
                    {"role": "assistant", "content": "a"},
                ]
            },
            "'completion' holds a 'user' message",
        ),
        (
            {
                "completion": [
                    {"role": "assistant", "content": "", "tool_calls": [{"name": "get_price"}]},
                    {"role": "assistant", "content": "a"},
                ]
            },
            "message 0, tool call 0 must be",
        ),
        (
            {
                "completion": [
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}],
                    },
                    {"role": "assistant", "content": "a"},
                ]
            },
            "'arguments' is not valid JSON",
        ),
        ({"tools": [{"name": "get_price"}]}, "row 1: 'tools' must be a list of"),
        ({"tools": "not json"}, "row 1: 'tools' is not valid JSON"),
    ],
)
def test_what_cannot_be_rendered_is_refused_naming_the_row(
    changes: dict[str, Any], problem: str
) -> None:
    with pytest.raises(NotAnSftExample, match="row 1") as refused:
        sft_examples([tool_row(**changes)])
    assert problem in str(refused.value), refused.value
