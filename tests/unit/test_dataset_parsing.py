from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from service.datasets.parsing import detect_format, parse_dataset
from service.errors import InvalidDataset


def test_jsonl_keeps_every_column_and_skips_blank_lines() -> None:
    content = b'{"prompt": "a", "x": 1}\n\n{"prompt": "b", "y": [1, 2]}\n'
    parsed = parse_dataset(content, "jsonl", max_rows=10)
    assert parsed.rows == [{"prompt": "a", "x": 1}, {"prompt": "b", "y": [1, 2]}]
    assert parsed.columns == ["prompt", "x", "y"]


def test_csv_chat_prompt_in_a_cell_is_read_as_messages() -> None:
    messages = [{"role": "user", "content": "hi, there"}]
    content = ("prompt,answer\n" + '"' + json.dumps(messages).replace('"', '""') + '",x\n').encode()
    parsed = parse_dataset(content, "csv", max_rows=10)
    assert parsed.rows[0]["prompt"] == messages
    assert parsed.prompt_kind == "chat"


def test_parquet_cells_become_json_values() -> None:
    buffer = io.BytesIO()
    pq.write_table(pa.table({"prompt": ["p"], "score": [float("nan")], "n": [3]}), buffer)
    parsed = parse_dataset(buffer.getvalue(), "parquet", max_rows=10)
    assert parsed.rows == [{"prompt": "p", "score": None, "n": 3}]


def test_openai_s_tool_calling_conversations_are_read_and_a_null_content_only_with_calls() -> None:
    """OpenAI's chat fine-tuning format writes a tool call as an assistant message whose
    content is null: such a file uploads; a null content anywhere else is refused."""
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    conversation = [
        {"role": "user", "content": "Use f."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        {"role": "assistant", "content": "It is 42."},
    ]
    parsed = parse_dataset(json.dumps({"messages": conversation}).encode(), "jsonl", max_rows=10)
    assert parsed.rows[0]["messages"] == conversation
    for wrong in ({**conversation[1], "tool_calls": []}, {**conversation[2], "content": None}):
        row = {"messages": [conversation[0], wrong]}
        with pytest.raises(
            InvalidDataset, match=r"record 1: message 1 must be .* string 'content'"
        ):
            parse_dataset(json.dumps(row).encode(), "jsonl", max_rows=10)


def test_mixed_prompt_kinds_are_rejected() -> None:
    content = b'{"prompt": "a"}\n{"prompt": [{"role": "user", "content": "b"}]}\n'
    with pytest.raises(InvalidDataset, match="mixed prompts"):
        parse_dataset(content, "jsonl", max_rows=10)


def test_row_limit() -> None:
    content = b'{"prompt": "a"}\n{"prompt": "b"}\n'
    with pytest.raises(InvalidDataset, match="limit is 1"):
        parse_dataset(content, "jsonl", max_rows=1)


def test_csv_with_extra_fields_names_the_line() -> None:
    with pytest.raises(InvalidDataset, match="line 3"):
        parse_dataset(b"prompt\na\nb,c\n", "csv", max_rows=10)


@pytest.mark.parametrize(
    ("filename", "declared", "expected"),
    [
        ("a.jsonl", None, "jsonl"),
        ("a.CSV", None, "csv"),
        ("a.pq", None, "parquet"),
        ("x", "csv", "csv"),
    ],
)
def test_detect_format(filename: str, declared: str | None, expected: str) -> None:
    assert detect_format(filename, declared) == expected
