"""Ship a model: a trained job's adapter merged into its base model on a worker, downloaded
through the API, the SDK and the CLI, and loaded with plain transformers; the adapter and a
merged model pushed to a hub (a fake one: the true outside edge) with the user's token,
which is never stored or logged in clear."""

from __future__ import annotations

import io
import json
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from peft import PeftModel
from sqlalchemy import create_engine, text
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

import rft
from rft.cli.app import app
from service.base_models.built_in.tiny_model import ensure_tiny_model
from service.db import to_sqlalchemy_url
from service.exports.status import ExportStage
from service.stack import LocalStack
from tests.conftest import SESSION_HUB_TOKEN, new_tenant_key, tenant_client
from tests.fake_hub import FakeHub
from tests.integration.helpers import train_a_share_job

pytestmark = pytest.mark.integration

HF_TOKEN = SESSION_HUB_TOKEN
WRONG_TOKEN = f"hf_wrong_{uuid.uuid4().hex}"
PROMPTS = ["Write about cats:", "<|im_start|>user\nWrite about snow:<|im_end|>\n"]


@pytest.fixture(scope="module")
def hub(session_hub: FakeHub) -> FakeHub:
    """The session stack's fake hub: its workers push there (RFT_HUB_ENDPOINT)."""
    return session_hub


@pytest.fixture(scope="module")
def export_stack(stack: LocalStack) -> LocalStack:
    return stack


@pytest.fixture(scope="module")
def api_key(export_stack: LocalStack) -> str:
    return new_tenant_key(export_stack)


@pytest.fixture(scope="module")
def client(export_stack: LocalStack, api_key: str) -> Iterator[httpx.Client]:
    with tenant_client(export_stack, api_key) as http:
        http.timeout = httpx.Timeout(120)
        yield http


@pytest.fixture(scope="module")
def job(client: httpx.Client) -> dict[str, Any]:
    """Two steps at a learning rate that moves the adapter, a checkpoint at each, and the hub
    token among the job's secrets."""
    return train_a_share_job(
        client, train_steps=2, checkpoint_every=1, secrets={"HF_TOKEN": HF_TOKEN}
    )


@pytest.fixture(scope="module")
def base_dir(stack: LocalStack) -> Path:
    return ensure_tiny_model(stack.state_dir / "models")


def unpack(content: bytes, into: Path) -> Path:
    into.mkdir(parents=True)
    archive = into / "download.tar.gz"
    archive.write_bytes(content)
    with tarfile.open(archive) as packed:
        packed.extractall(into, filter="data")
        (top,) = {Path(name).parts[0] for name in packed.getnames()}
    return into / top


def logits(model: Any, tokenizer_dir: Path) -> torch.Tensor:
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    with torch.no_grad():
        return torch.cat(
            [model(**tokenizer(p, return_tensors="pt")).logits[0].float() for p in PROMPTS]
        )


def test_the_merged_download_loads_with_transformers_and_answers_as_base_plus_adapter(
    client: httpx.Client, job: dict[str, Any], base_dir: Path, tmp_path: Path
) -> None:
    merged_path = f"/v1/jobs/{job['id']}/merged.tar.gz"
    before = client.get(merged_path)
    assert before.status_code == 409 and before.json()["error"] == "ExportNotBuilt"
    assert f"POST /v1/jobs/{job['id']}/exports" in before.json()["detail"]

    started = client.post(f"/v1/jobs/{job['id']}/exports", json={"kind": "merged"})
    assert started.status_code == 202, started.text
    export = started.json()
    assert started.headers["Location"] == f"/v1/jobs/{job['id']}/exports/{export['id']}"
    assert export["status"] == "queued" and export["download_path"] == merged_path
    again = client.post(f"/v1/jobs/{job['id']}/exports", json={"kind": "merged"})
    assert again.json()["id"] == export["id"]  # one build per adapter and dtype

    stages: list[str] = []  # each stage seen while polling, once, in the order seen
    deadline = time.monotonic() + 300
    while (response := client.get(merged_path)).status_code == 202:
        assert response.headers["Location"] == started.headers["Location"]
        stage = response.json()["stage"]
        if stage is not None and stage not in stages:
            stages.append(stage)
        assert time.monotonic() < deadline, response.json()
        time.sleep(0.1)
    assert response.status_code == 200, response.text
    assert response.headers["content-disposition"] == (
        f'attachment; filename="{job["id"]}-merged.tar.gz"'
    )
    # Polling sees some of the stages (a fast machine skips past short ones), always in the
    # build's order, and only a merged download's: nothing is uploaded.
    order = [stage.value for stage in ExportStage]
    assert stages and stages == sorted(stages, key=order.index), stages
    assert set(stages) <= {"loading", "merging", "saving", "archiving", "storing"}, stages
    done = client.get(started.headers["Location"]).json()
    assert done["status"] == "succeeded" and done["progress"] == 1.0
    assert done["size_bytes"] == len(response.content)

    merged_dir = unpack(response.content, tmp_path / "merged")
    assert (merged_dir / "model.safetensors").is_file()
    assert "library_name: transformers" in (merged_dir / "README.md").read_text()
    merged = AutoModelForCausalLM.from_pretrained(merged_dir).eval()

    adapter = client.get(f"/v1/jobs/{job['id']}/adapter.tar.gz")
    adapter_dir = unpack(adapter.content, tmp_path / "adapter")
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).eval()
    base_logits = logits(base, base_dir)
    expected = logits(PeftModel.from_pretrained(base, str(adapter_dir)).eval(), base_dir)
    got = logits(merged, merged_dir)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    assert (expected - base_logits).abs().max() > 1e-3  # the trained adapter changes answers


def test_the_sdk_and_the_cli_download_a_checkpoint_merged(
    export_stack: LocalStack, api_key: str, job: dict[str, Any], tmp_path: Path
) -> None:
    with rft.Client(api_key=api_key, base_url=export_stack.base_url, timeout=60) as sdk:
        seen: list[rft.Export] = []
        folder = sdk.jobs.download_merged(
            job["id"], tmp_path / "sdk", checkpoint=1, poll_interval=0.2, on_update=seen.append
        )
        assert folder == tmp_path / "sdk" / f"{job['id']}-step-1-merged"
        assert seen[-1].status == rft.ExportStatus.SUCCEEDED
        model = AutoModelForCausalLM.from_pretrained(folder)
        assert model.config.model_type == "qwen2"

    # Built already: the CLI downloads the same archive.
    env = {"RFT_API_KEY": api_key, "RFT_BASE_URL": export_stack.base_url}
    output = tmp_path / "cli"
    result = CliRunner().invoke(
        app,
        ["jobs", "download", job["id"], "--merged", "--checkpoint", "1", "-o", str(output)],
        env=env,
    )
    assert result.exit_code == 0, result.output
    cli_folder = output / f"{job['id']}-step-1-merged"
    assert (cli_folder / "model.safetensors").read_bytes() == (
        folder / "model.safetensors"
    ).read_bytes()


def test_the_adapter_goes_to_the_hub_with_the_jobs_secret(
    export_stack: LocalStack, api_key: str, client: httpx.Client, job: dict[str, Any], hub: FakeHub
) -> None:
    with rft.Client(api_key=api_key, base_url=export_stack.base_url, timeout=60) as sdk:
        export = sdk.jobs.push_to_hub(
            job["id"], "rft-test/adapter", token_secret="HF_TOKEN", poll_interval=0.2
        )
    assert export.hub is not None and export.hub.commit_url is not None
    assert export.hub.commit_url.startswith(f"{hub.endpoint}/rft-test/adapter/commit/")
    repo = hub.repos["rft-test/adapter"]
    assert repo.private
    config = json.loads(repo.files["adapter_config.json"])
    assert config["base_model_name_or_path"] == "rft-tiny"  # not a path of the worker
    with tarfile.open(fileobj=_bytes(client.get(f"/v1/jobs/{job['id']}/adapter.tar.gz"))) as a:
        weights = a.extractfile(f"{job['id']}-adapter/adapter_model.safetensors")
        assert weights is not None and repo.files["adapter_model.safetensors"] == weights.read()
    assert "library_name: peft" in repo.files["README.md"].decode()


def test_a_merged_model_goes_to_the_hub_from_the_cli_with_a_token_of_its_own(
    export_stack: LocalStack, api_key: str, job: dict[str, Any], hub: FakeHub
) -> None:
    env = {"RFT_API_KEY": api_key, "RFT_BASE_URL": export_stack.base_url, "HF_TOKEN": HF_TOKEN}
    result = CliRunner().invoke(
        app,
        ["jobs", "push-to-hub", job["id"], "rft-test/merged", "--merged", "--checkpoint", "1"],
        env=env,
    )
    assert result.exit_code == 0, result.output
    assert "pushed rft-test/merged" in result.output
    files = hub.repos["rft-test/merged"].files
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md"} <= set(files)


def test_a_wrong_token_fails_the_push_before_the_merge_with_the_hubs_401(
    client: httpx.Client, job: dict[str, Any]
) -> None:
    body = {"kind": "merged", "hub": {"repo_id": "rft-test/wrong", "token": WRONG_TOKEN}}
    export = client.post(f"/v1/jobs/{job['id']}/exports", json=body).json()
    deadline = time.monotonic() + 120
    while export["status"] in ("queued", "running"):
        assert export["stage"] in (None, "loading"), export  # it fails before merging
        assert time.monotonic() < deadline, export
        time.sleep(0.1)
        export = client.get(f"/v1/jobs/{job['id']}/exports/{export['id']}").json()
    assert export["status"] == "failed"
    assert "refused the token (HTTP 401 Unauthorized)" in export["failure_reason"]
    assert WRONG_TOKEN not in json.dumps(export)


def test_no_token_is_stored_logged_or_shown_in_clear(
    export_stack: LocalStack, client: httpx.Client, job: dict[str, Any]
) -> None:
    """Run after the pushes above: the job's secret and the tokens given with requests."""
    listing = client.get(f"/v1/jobs/{job['id']}/exports").json()["data"]
    assert len([e for e in listing if e["hub"] is not None]) >= 3
    shown = json.dumps(listing) + client.get(f"/v1/jobs/{job['id']}").text
    engine = create_engine(to_sqlalchemy_url(export_stack.database_url or ""))
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT row_to_json(e)::text FROM exports e")).all()
            jobs = connection.execute(text("SELECT row_to_json(j)::text FROM jobs j")).all()
            sealed = connection.execute(
                text("SELECT count(*) FROM exports WHERE hub_token_sealed IS NOT NULL")
            ).scalar()
    finally:
        engine.dispose()
    stored = " ".join(row[0] for row in [*rows, *jobs])
    logs = " ".join(path.read_text(errors="replace") for path in export_stack.log_dir.iterdir())
    for token in (HF_TOKEN, WRONG_TOKEN):
        assert token not in shown
        assert token not in stored
        assert token not in logs
    assert sealed == 0  # tokens given with a request are erased once the push ends


def _bytes(response: httpx.Response) -> io.BytesIO:
    assert response.status_code == 200, response.text
    return io.BytesIO(response.content)
