"""The inference server answers only the API: every generation needs RFT_INFERENCE_TOKEN,
which the API sends (a tenant's sandbox, or anything else on the network, holds no token)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
from fastapi.testclient import TestClient
from pydantic import SecretStr

from service.inference.protocol import GeneratedChoice, GenerationRequest, GenerationResult
from service.inference.service import InferenceUnavailable, ServedModel, _send
from service.settings import Settings
from workers.inference.server import create_app

TOKEN = "inference-token-for-tests"
REQUEST = {"base_model": "rft-tiny", "prompt": "hi", "max_tokens": 4, "temperature": 1.0,
           "top_p": 1.0, "n": 1}  # fmt: skip


class AnsweringPool:
    backend = "fake"

    def __init__(self) -> None:
        self.requests: list[GenerationRequest] = []

    def generate(self, request: GenerationRequest) -> GenerationResult:
        self.requests.append(request)
        choice = GeneratedChoice(text="hello", finish_reason="stop", completion_tokens=1)
        return GenerationResult(choices=[choice], prompt_tokens=1)

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}, {"Authorization": "Bearer "}],
)
def test_a_generation_without_the_token_is_refused(headers: dict[str, str]) -> None:
    pool = AnsweringPool()
    with TestClient(create_app(pool, token=SecretStr(TOKEN))) as client:  # type: ignore[arg-type]
        response = client.post("/v1/generate", json=REQUEST, headers=headers)
        assert response.status_code == 401
        assert client.get("/healthz").status_code == 200  # says only that it is up
    assert pool.requests == []


def test_the_apis_token_is_answered() -> None:
    pool = AnsweringPool()
    with TestClient(create_app(pool, token=SecretStr(TOKEN))) as client:  # type: ignore[arg-type]
        response = client.post(
            "/v1/generate", json=REQUEST, headers={"Authorization": f"Bearer {TOKEN}"}
        )
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["text"] == "hello"


def test_the_server_refuses_to_start_without_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    from service.settings import get_settings

    monkeypatch.delenv("RFT_INFERENCE_TOKEN", raising=False)
    get_settings.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="RFT_INFERENCE_TOKEN"):
            create_app(AnsweringPool())  # type: ignore[arg-type]
    finally:
        get_settings.cache_clear()


@pytest.fixture
def served() -> Iterator[str]:
    """The real server app (with the answering pool) on a loopback port of its own."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    app = create_app(AnsweringPool(), token=SecretStr(TOKEN))  # type: ignore[arg-type]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the inference app did not start")
        time.sleep(0.01)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    server.should_exit = True
    thread.join()
    listener.close()


def test_the_api_sends_its_token_and_names_the_setting_when_refused(served: str) -> None:
    served_model = ServedModel(name="rft-tiny", base_model="rft-tiny", adapter_uri=None)
    request = GenerationRequest.model_validate(REQUEST)
    right = Settings(inference_url=served, inference_token=SecretStr(TOKEN))
    client, response = _send(served_model, request, right)
    try:
        assert response.status_code == 200
    finally:
        response.close()
        client.close()
    for token in (SecretStr("not-the-token"), None):
        wrong = Settings(inference_url=served, inference_token=token)
        with pytest.raises(InferenceUnavailable, match="RFT_INFERENCE_TOKEN"):
            _send(served_model, request, wrong)
