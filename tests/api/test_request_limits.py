"""Limits that hold: body sizes whether or not the length is declared, what a refusal echoes,
reward code that never finishes loading, and the size of a dataset preview."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator

import httpx

from service.app import create_app
from service.request_input import RequestInputGuard
from service.settings import get_settings
from tests.tiny import TINY_HYPERPARAMETERS

SOURCE = "def f(prompt, completion, example):\n    return 1.0\n"


def chunked(head: bytes, filler_bytes: int, tail: bytes) -> Iterator[bytes]:
    """A body sent without Content-Length (httpx streams an iterator chunked)."""
    yield head
    for _ in range(filler_bytes // (1 << 20)):
        yield b"x" * (1 << 20)
    yield tail


def test_a_chunked_json_body_over_the_limit_is_413_naming_it(client: httpx.Client) -> None:
    limit = get_settings().max_request_bytes
    response = client.post(
        "/v1/reward-functions/test",
        content=chunked(b'{"reward_functions": {"f": {"source": "', limit + (1 << 20), b'"}}}'),
        headers={"Content-Type": "application/json"},
    )
    assert "content-length" not in response.request.headers
    assert response.status_code == 413, response.text
    assert response.json()["detail"] == (
        f"request body exceeds the {limit}-byte limit (RFT_MAX_REQUEST_BYTES)"
    )


def test_a_chunked_upload_over_the_limit_is_413_naming_it() -> None:
    """The app's real endpoint behind a guard with a small upload limit, fed the body in
    chunks as a server would: sending RFT_MAX_UPLOAD_BYTES (200 MB) through the test stack
    would prove the same at a hundred times the cost."""
    guarded = RequestInputGuard(create_app(), max_request_bytes=1024, max_upload_bytes=64 * 1024)
    boundary = b"rftboundary"
    head = (
        b"--" + boundary + b'\r\nContent-Disposition: form-data; name="file"; '
        b'filename="d.jsonl"\r\nContent-Type: application/octet-stream\r\n\r\n'
    )
    chunks = [head] + [b'{"prompt": "p"}\n' * 512] * 16  # 128 KiB of rows, no length
    sent: list[dict] = []
    unread = [{"type": "http.request", "body": c, "more_body": True} for c in chunks]

    async def receive() -> dict:
        return unread.pop(0) if unread else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/v1/datasets", "raw_path": b"/v1/datasets",
        "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "headers": [
            (b"content-type", b"multipart/form-data; boundary=" + boundary),
            (b"transfer-encoding", b"chunked"),
            (b"authorization", b"Bearer not-checked-before-the-body-is-read"),
        ],
    }  # fmt: skip
    asyncio.run(guarded(scope, receive, send))

    starts = [m for m in sent if m["type"] == "http.response.start"]
    assert [m["status"] for m in starts] == [413]  # one answer: the endpoint's is dropped
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert json.loads(body)["detail"] == (
        "upload exceeds the 65536-byte limit (RFT_MAX_UPLOAD_BYTES)"
    )
    assert unread, "the guard stopped reading at the limit, not at the end of the body"


def test_a_refused_long_reward_source_is_not_echoed_back(client: httpx.Client) -> None:
    source = "# " + "x" * 1_000_000 + "\n" + SOURCE
    response = client.post(
        "/v1/reward-functions/test",
        json={
            "reward_functions": {"f": {"source": source}},
            "samples": [{"prompt": "p", "completion": "c"}],
        },
    )
    assert response.status_code == 422, response.text[:300]
    assert len(response.content) < 5_000
    problem = response.json()["detail"][0]
    assert problem["type"] == "string_too_long"
    assert problem["input"].endswith(f"... ({len(source)} characters, not repeated)")


def test_short_inputs_are_still_echoed(client: httpx.Client) -> None:
    response = client.get("/v1/jobs", params={"limit": "many"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["input"] == "many"


def test_the_dataset_preview_is_bounded(client: httpx.Client) -> None:
    """A row holding megabytes comes back as a glance, with markers saying what was cut."""
    huge = {
        "prompt": "p",
        "text": "x" * 2_000_000,
        "items": list(range(10_000)),
        "wide": {f"k{i}": i for i in range(1_000)},
    }
    content = (json.dumps(huge) + "\n" + json.dumps({"prompt": "small"})).encode()
    dataset = client.post("/v1/datasets", files={"file": ("big.jsonl", content)})
    assert dataset.status_code == 201, dataset.text[:300]

    detail = client.get(f"/v1/datasets/{dataset.json()['id']}")
    assert len(detail.content) < 50_000
    first, second = detail.json()["preview"]
    assert first["text"] == "x" * 1000 + "… [1999000 more characters]"
    assert first["items"] == [*range(50), "… [9950 more items]"]
    assert len(first["wide"]) == 51 and first["wide"]["…"] == "[950 more keys]"
    assert second == {"prompt": "small"}


def test_reward_code_that_never_finishes_is_stopped_at_its_limits_while_the_api_answers(
    client: httpx.Client,
) -> None:
    """Reward code that never finishes is stopped at its own limit, not at the 30 s call
    limit: module-level code that loops (the reward test endpoint) or sleeps (a job's creation)
    at RFT_REWARD_LOAD_TIMEOUT_S, a function that never returns at
    RFT_REWARD_PREFLIGHT_TIMEOUT_S (pre-flight runs inside the create request). The three
    requests run at once, off the event loop: the API answers others meanwhile, and no job is
    stored."""
    settings = get_settings()
    load_limit, preflight_limit = (
        settings.reward_load_timeout_s,
        settings.reward_preflight_timeout_s,
    )
    assert max(load_limit, preflight_limit) < settings.reward_call_timeout_s
    rows = b'{"prompt": "p"}\n'
    dataset = client.post("/v1/datasets", files={"file": ("d.jsonl", rows)}).json()

    def job_with(source: str) -> dict[str, object]:
        return {
            "dataset_id": dataset["id"],
            "reward_functions": {"f": {"source": source}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 1},
        }

    attempts = {
        "endless import": (
            "/v1/reward-functions/test",
            {
                "reward_functions": {"f": {"source": "while True:\n    pass\n" + SOURCE}},
                "samples": [{"prompt": "p", "completion": "c"}],
            },
        ),
        "sleeping import": ("/v1/jobs", job_with("import time\ntime.sleep(10**6)\n" + SOURCE)),
        "endless function": (
            "/v1/jobs",
            job_with("def f(prompt, completion, example):\n    while True:\n        pass\n"),
        ),
    }
    outcome: dict[str, httpx.Response] = {}

    def attempt(name: str) -> None:
        path, body = attempts[name]
        with httpx.Client(
            base_url=str(client.base_url), headers=client.headers, timeout=120
        ) as http:
            outcome[name] = http.post(path, json=body)

    threads = [threading.Thread(target=attempt, args=(name,)) for name in attempts]
    for thread in threads:
        thread.start()
    answered_meanwhile = 0
    while any(thread.is_alive() for thread in threads):
        if client.get("/v1/jobs").status_code == 200 and any(t.is_alive() for t in threads):
            answered_meanwhile += 1
        threads[0].join(timeout=0.5)
    for thread in threads:
        thread.join()
    assert answered_meanwhile > 0
    for name in ("endless import", "sleeping import"):
        response = outcome[name]
        assert response.status_code == 400, (name, response.text)
        assert f"loading took longer than {load_limit:g} s" in response.json()["detail"], name
    detail = outcome["endless function"].json()["detail"]
    assert outcome["endless function"].status_code == 400, detail
    assert "failed on every pre-flight sample" in detail and "timeout" in detail
    assert f"{preflight_limit:g} s" in detail
    assert client.get("/v1/jobs").json()["data"] == []
