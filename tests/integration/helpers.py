"""Small HTTP helpers shared by the integration tests."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx

FINAL = {"succeeded", "failed", "cancelled"}


def upload_jsonl(client: httpx.Client, rows: list[dict[str, Any]]) -> str:
    content = "\n".join(json.dumps(r) for r in rows).encode()
    response = client.post("/v1/datasets", files={"file": ("rows.jsonl", content)})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def wait_for(client: httpx.Client, job_id: str, timeout_s: float = 600) -> dict[str, Any]:
    return wait_until(client, job_id, lambda job: job["status"] in FINAL, timeout_s=timeout_s)


def wait_until(
    client: httpx.Client,
    job_id: str,
    condition: Callable[[dict[str, Any]], bool],
    *,
    timeout_s: float = 600,
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if condition(job):
            return job
        if job["status"] in FINAL:
            raise AssertionError(f"job {job_id} ended before the condition held: {job}")
        time.sleep(0.2)
    raise AssertionError(f"job {job_id}: condition not met within {timeout_s} s: {job}")


def all_pages(client: httpx.Client, path: str, **params: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    cursor: str | int = 0
    while True:
        page = client.get(path, params={"after": cursor, "limit": 500, **params}).json()
        rows.extend(page["data"])
        if not page["has_more"]:
            return rows
        cursor = page["next_cursor"]


def create_job(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    return dict(response.json())


# A job trained towards the letter 'a' answers differently from its base model: the chat tests
# (transformers and vLLM serving) train one and talk to both.
A_SHARE = (
    "def a_share(prompt, completion, example):\n"
    "    text = completion if isinstance(completion, str) else completion[-1]['content']\n"
    "    return text.count('a') / max(len(text), 1)\n"
)
PROMPT = "Write about cats:"


def chat(client: httpx.Client, model: str, **overrides: Any) -> httpx.Response:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "temperature": 0,
        "max_tokens": 16,
        **overrides,
    }
    return client.post("/v1/chat/completions", json=body)
