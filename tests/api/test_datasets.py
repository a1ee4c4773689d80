from __future__ import annotations

import io
import json

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROWS = [
    {"prompt": "Say hi", "answer": "hi", "difficulty": 1},
    {"prompt": "Say bye", "answer": "bye", "difficulty": 2},
]


def upload(client: httpx.Client, filename: str, content: bytes, **form: str) -> httpx.Response:
    return client.post("/v1/datasets", files={"file": (filename, content)}, data=form)


def jsonl(rows: list[dict]) -> bytes:
    return "\n".join(json.dumps(r) for r in rows).encode()


def dataset_count(client: httpx.Client) -> int:
    return len(client.get("/v1/datasets", params={"limit": 1000}).json()["data"])


def test_upload_jsonl_returns_rows_and_columns(client: httpx.Client) -> None:
    response = upload(client, "train.jsonl", jsonl(ROWS))
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["row_count"] == 2
    assert body["columns"] == ["prompt", "answer", "difficulty"]
    assert body["prompt_kind"] == "text"

    detail = client.get(f"/v1/datasets/{body['id']}").json()
    assert detail["preview"] == ROWS
    assert body["id"] in [d["id"] for d in client.get("/v1/datasets").json()["data"]]


def test_upload_csv(client: httpx.Client) -> None:
    content = b"prompt,answer\nSay hi,hi\nSay bye,bye\n"
    body = upload(client, "train.csv", content).json()
    assert body["row_count"] == 2 and body["file_format"] == "csv"
    preview = client.get(f"/v1/datasets/{body['id']}").json()["preview"]
    assert preview[1] == {"prompt": "Say bye", "answer": "bye"}


def test_upload_parquet_with_chat_prompts(client: httpx.Client) -> None:
    table = pa.table(
        {
            "prompt": [[{"role": "user", "content": "Say hi"}], [{"role": "user", "content": "x"}]],
            "answer": ["hi", "x"],
        }
    )
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    response = upload(client, "train.parquet", buffer.getvalue())
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["prompt_kind"] == "chat"
    preview = client.get(f"/v1/datasets/{body['id']}").json()["preview"]
    assert preview[0]["prompt"] == [{"role": "user", "content": "Say hi"}]


@pytest.mark.parametrize(
    ("filename", "content", "message"),
    [
        ("bad.jsonl", b'{"prompt": "ok"}\n{"prompt": broken\n', "line 2: not valid JSON"),
        ("bad.jsonl", jsonl([{"question": "no prompt here"}]), "no 'prompt' column"),
        ("bad.jsonl", jsonl([{"prompt": ""}]), "'prompt' is empty"),
        ("bad.jsonl", jsonl([{"prompt": 3}]), "must be a string or a list of chat messages"),
        ("bad.jsonl", jsonl([{"prompt": [{"role": "robot", "content": "x"}]}]), "has role"),
        ("bad.jsonl", b"", "the file is empty"),
        ("bad.csv", b"answer\nhi\n", "no 'prompt' column"),
        ("bad.parquet", b"PAR1 definitely not parquet", "not a readable Parquet file"),
        ("data.txt", b"prompt\nhi\n", "cannot tell the format"),
    ],
)
def test_malformed_files_are_rejected_and_store_nothing(
    client: httpx.Client, filename: str, content: bytes, message: str
) -> None:
    before = dataset_count(client)
    response = upload(client, filename, content)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "InvalidDataset"
    assert message in response.json()["detail"]
    assert dataset_count(client) == before


def test_unknown_and_foreign_datasets_are_404(
    client: httpx.Client, other_client: httpx.Client
) -> None:
    mine = upload(client, "train.jsonl", jsonl(ROWS)).json()
    assert client.get("/v1/datasets/ds_missing").status_code == 404
    response = other_client.get(f"/v1/datasets/{mine['id']}")
    assert response.status_code == 404
    assert response.json() == {"error": "NotFound", "detail": f"dataset {mine['id']!r} not found"}
    assert mine["id"] not in [d["id"] for d in other_client.get("/v1/datasets").json()["data"]]


def test_requests_without_a_valid_key_are_401(client: httpx.Client) -> None:
    bare = httpx.Client(base_url=str(client.base_url))
    assert bare.get("/v1/datasets").status_code == 401
    response = bare.get("/v1/datasets", headers={"Authorization": "Bearer rft_wrong"})
    assert response.status_code == 401
    assert response.json()["error"] == "Unauthorized"
