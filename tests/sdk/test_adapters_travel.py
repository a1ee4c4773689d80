"""Adapters that travel: downloads name the base model the job was given, and the built-in
model downloads too, so an adapter of a job on rft-tiny loads and generates away from the server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

import rft
from rft.cli.app import app
from service.stack import LocalStack
from tests.sdk.conftest import FinishedJob

pytestmark = pytest.mark.integration

# Run in a fresh interpreter, in the download folder, with the hub off: the base model can only
# come from the adapter's config ("rft-tiny") resolved against the folder beside it.
GENERATE = """
import json, sys
from peft import AutoPeftModelForCausalLM
from transformers import AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("rft-tiny")
for folder in sys.argv[1:]:
    model = AutoPeftModelForCausalLM.from_pretrained(folder)
    inputs = tokenizer("Say yes:", return_tensors="pt")
    output = model.generate(**inputs, max_new_tokens=6, do_sample=False)
    new_tokens = output.shape[1] - inputs["input_ids"].shape[1]
    print(json.dumps({"folder": folder, "new_tokens": new_tokens,
                      "base": model.peft_config["default"].base_model_name_or_path}))
"""


def test_adapters_and_the_tiny_model_load_from_the_downloads_alone(
    stack: LocalStack, finished_job: FinishedJob, finished_client: rft.Client, tmp_path: Path
) -> None:
    job = finished_job.job  # trained on the tiny model, a checkpoint at each step
    api_key, rft_client = finished_job.api_key, finished_client

    elsewhere = tmp_path / "elsewhere"
    model = rft_client.models.download("rft-tiny", elsewhere)
    assert model == elsewhere / "rft-tiny"
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in model.iterdir()
    }
    adapter = rft_client.jobs.download_adapter(job.id, elsewhere)
    checkpoint = rft_client.jobs.download_checkpoint(job.id, 1, elsewhere)
    for folder in (adapter, checkpoint):
        config = json.loads((folder / "adapter_config.json").read_text())
        # The name the job was given, not the folder the worker built it in.
        assert config["base_model_name_or_path"] == "rft-tiny", config

    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-c", GENERATE, adapter.name, checkpoint.name],
        cwd=elsewhere,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    generated = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [g["folder"] for g in generated] == [adapter.name, checkpoint.name]
    assert all(g["new_tokens"] > 0 and g["base"] == "rft-tiny" for g in generated), generated

    # The CLI reaches the same download.
    cli = CliRunner(env={"RFT_API_KEY": api_key, "RFT_BASE_URL": stack.base_url, "COLUMNS": "200"})
    result_cli = cli.invoke(app, ["models", "download", "rft-tiny", "-o", str(tmp_path / "cli")])
    assert result_cli.exit_code == 0, result_cli.output
    assert (tmp_path / "cli" / "rft-tiny" / "config.json").is_file()


def test_only_the_built_in_model_downloads(client: httpx.Client) -> None:
    response = client.get("/v1/models/gpt2/download")
    assert response.status_code == 404
    assert "only the built-in model 'rft-tiny'" in response.json()["detail"]
