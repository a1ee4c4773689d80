"""OpenAI's files API with the official openai package: fine-tune JSONL becomes one of our
datasets (the same id), with ``messages`` as the chat prompt and the other fields kept."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from service.stack import LocalStack

ROWS: list[dict[str, Any]] = [
    {"messages": [{"role": "user", "content": "What is 2+2?"}], "answer": "4"},
    {"messages": [{"role": "user", "content": "What is 3+3?"}], "answer": "6", "level": 1},
]


@pytest.fixture
def openai_client(stack: LocalStack, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.base_url}/v1", api_key=api_key, max_retries=0)


def jsonl(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def test_upload_retrieve_list_content_delete(
    openai_client: openai.OpenAI, client: httpx.Client, other_client: httpx.Client
) -> None:
    uploaded = openai_client.files.create(file=("train.jsonl", jsonl(ROWS)), purpose="fine-tune")
    assert uploaded.object == "file"
    assert uploaded.purpose == "fine-tune"
    assert uploaded.filename == "train.jsonl"
    assert uploaded.status == "processed"
    assert uploaded.bytes > 0

    # One system underneath: the file is a dataset of chat prompts with the extra fields.
    dataset = client.get(f"/v1/datasets/{uploaded.id}").json()
    assert dataset["prompt_kind"] == "chat"
    assert dataset["row_count"] == 2
    assert dataset["preview"][1] == {"prompt": ROWS[1]["messages"], "answer": "6", "level": 1}
    assert other_client.get(f"/v1/datasets/{uploaded.id}").status_code == 404

    assert openai_client.files.retrieve(uploaded.id).filename == "train.jsonl"
    second = openai_client.files.create(file=("b.jsonl", jsonl(ROWS[:1])), purpose="fine-tune")
    listed = [f.id for f in openai_client.files.list()]
    assert listed[:2] == [second.id, uploaded.id]
    first_page = openai_client.files.list(limit=1)
    assert [f.id for f in first_page.data] == [second.id]
    assert first_page.has_more
    assert [f.id for f in openai_client.files.list(limit=1, after=second.id).data] == [uploaded.id]

    content = openai_client.files.content(uploaded.id).read()
    assert [json.loads(line) for line in content.splitlines()] == ROWS

    deleted = openai_client.files.delete(uploaded.id)
    assert deleted.deleted and deleted.id == uploaded.id
    with pytest.raises(openai.NotFoundError) as missing:
        openai_client.files.retrieve(uploaded.id)
    assert missing.value.body == {
        "message": f"No such File object: {uploaded.id}",
        "type": "invalid_request_error",
        "param": None,
        "code": "NotFound",
    }


@pytest.mark.parametrize(
    ("content", "purpose", "message"),
    [
        (jsonl(ROWS), "assistants", "only 'fine-tune'"),
        (b'{"answer": "4"}\n', "fine-tune", "line 1: 'messages' must be a non-empty list"),
        (b'{"messages": [{"role": "user", "content": "x"}]}\n{oops\n', "fine-tune", "line 2"),
        (b"\n\n", "fine-tune", "no rows"),
        (b"\xff\xfe", "fine-tune", "UTF-8"),
    ],
)
def test_bad_files_are_400_in_openai_shape(
    openai_client: openai.OpenAI, content: bytes, purpose: str, message: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        openai_client.files.create(file=("x.jsonl", content), purpose=purpose)  # type: ignore[arg-type]
    assert message in refused.value.message
    assert refused.value.type == "invalid_request_error"
