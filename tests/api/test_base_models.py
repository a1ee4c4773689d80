"""Base-model pre-flight at job creation, against a fake hub (the true outside edge)."""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.base_models.service import check_base_model
from service.errors import BadRequest, ServiceUnavailable
from service.settings import Settings
from service.stack import LocalStack
from tests.conftest import tenant_client
from tests.fake_hub import fake_hub
from tests.integration.helpers import upload_jsonl
from tests.tiny import TINY_HYPERPARAMETERS

HUB_MODEL = "rft-test/tiny-chat"


@pytest.fixture(scope="module")
def model_root() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="rft-models-"))
    (root / "good").mkdir()
    (root / "good" / "config.json").write_text("{}")
    (root / "empty").mkdir()
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def hub_stack(model_root: Path) -> Iterator[tuple[LocalStack, httpx.Client]]:
    """An API whose hub is the fake one; no worker: created jobs stay queued."""
    with fake_hub({HUB_MODEL}) as endpoint:
        state_dir = Path(tempfile.mkdtemp(prefix="rft-hub-"))
        env = {"RFT_HUB_ENDPOINT": endpoint, "RFT_MODEL_ROOTS": str(model_root)}
        with (
            LocalStack(state_dir, workers=0, extra_env=env) as stack,
            tenant_client(stack) as client,
        ):
            yield stack, client
        shutil.rmtree(state_dir, ignore_errors=True)


def create(client: httpx.Client, base_model: str) -> httpx.Response:
    dataset_id = upload_jsonl(client, [{"prompt": f"Say {w}:"} for w in "ab"])
    body: dict[str, Any] = {
        "dataset_id": dataset_id,
        "base_model": base_model,
        "reward_functions": {
            "one": {"source": "def one(prompt, completion, example):\n    return 1.0\n"}
        },
        "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 1},
    }
    return client.post("/v1/jobs", json=body)


def test_a_model_on_the_hub_is_accepted(hub_stack: tuple[LocalStack, httpx.Client]) -> None:
    _, client = hub_stack
    response = create(client, HUB_MODEL)
    assert response.status_code == 201, response.text
    assert response.json()["base_model"] == HUB_MODEL


@pytest.mark.parametrize(
    ("base_model", "detail"),
    [
        ("rft-test/no-such-model", "was not found on the Hugging Face hub"),
        (
            "not a model!",
            "is neither a built-in model (rft-tiny, rft-tiny-tools), an absolute path",
        ),
        ("/etc", "is not under any of the allowed model roots"),
        ("{root}/../etc", "is not under any of the allowed model roots"),
        ("{root}/empty", "has no config.json"),
        ("relative/../path", "is neither a built-in model (rft-tiny, rft-tiny-tools)"),
    ],
)
def test_unknown_models_are_400_naming_the_model(
    hub_stack: tuple[LocalStack, httpx.Client], model_root: Path, base_model: str, detail: str
) -> None:
    _, client = hub_stack
    base_model = base_model.format(root=model_root)
    before = len(client.get("/v1/jobs", params={"limit": 1000}).json()["data"])
    response = create(client, base_model)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "UnknownBaseModel"
    assert repr(base_model) in response.json()["detail"] and detail in response.json()["detail"]
    assert len(client.get("/v1/jobs", params={"limit": 1000}).json()["data"]) == before


def test_local_paths_under_the_model_roots(
    hub_stack: tuple[LocalStack, httpx.Client], model_root: Path
) -> None:
    _, client = hub_stack
    assert create(client, str(model_root / "good")).status_code == 201
    # Not on the API host: only a worker can tell, so the job says so and waits for one.
    elsewhere = create(client, str(model_root / "on-the-workers-only"))
    assert elsewhere.status_code == 201, elsewhere.text
    events = client.get(f"/v1/jobs/{elsewhere.json()['id']}/events/history").json()["data"]
    assert any(
        e["kind"] == "warning" and "does not exist on the API host" in e["message"] for e in events
    )


def closed_port_endpoint() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens there any more


def test_an_unreachable_hub_is_503_or_a_warning_as_configured() -> None:
    down = closed_port_endpoint()
    with pytest.raises(ServiceUnavailable, match="cannot be reached to check base_model 'org/m'"):
        check_base_model("org/m", Settings(hub_endpoint=down, hub_check="require"))
    warned = check_base_model("org/m", Settings(hub_endpoint=down, hub_check="warn"))
    assert len(warned.warnings) == 1 and "accepted unchecked" in warned.warnings[0]
    assert check_base_model("org/m", Settings(hub_endpoint=down, hub_check="off")).warnings == []


def test_local_paths_are_refused_without_model_roots() -> None:
    with pytest.raises(BadRequest, match="RFT_MODEL_ROOTS"):
        check_base_model("/models/qwen", Settings(model_roots=""))
