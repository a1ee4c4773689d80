"""A job that trains every weight (adapter 'full') through the real stack: its result is a
whole model, downloaded whole, served by the inference server in place of the base model."""

from __future__ import annotations

import io
import tarfile

import httpx
from transformers import AutoModelForCausalLM

from service.stack import LocalStack
from tests.integration.helpers import (
    assert_the_adapter_answers_differently,
    chat,
    train_a_share_job,
)


def test_a_full_fine_tuning_job_is_downloaded_and_served_as_a_whole_model(
    stack: LocalStack, tenant: httpx.Client, tmp_path: object
) -> None:
    # A lower rate than the adapter's: every weight moves.
    job = train_a_share_job(
        tenant, train_steps=4, checkpoint_every=2, adapter="full", learning_rate=2e-3
    )
    job_id = str(job["id"])
    assert job["hyperparameters"]["adapter"] == "full"

    response = tenant.get(f"/v1/jobs/{job_id}/adapter.tar.gz")
    assert response.status_code == 200, response.text
    with tarfile.open(fileobj=io.BytesIO(response.content)) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames()}
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= names, names
        assert "adapter_config.json" not in names
        archive.extractall(str(tmp_path), filter="data")
    model = AutoModelForCausalLM.from_pretrained(f"{tmp_path}/{job_id}-adapter")
    assert model.num_parameters() > 0

    # Nothing to merge: the download is the whole model already.
    refused = tenant.post(f"/v1/jobs/{job_id}/exports", json={"kind": "merged"})
    assert refused.status_code == 400, refused.text
    assert "trained every weight" in refused.json()["detail"]

    stack.start_inference()

    def answer(model_name: str) -> str:
        reply = chat(tenant, model_name)
        assert reply.status_code == 200, reply.text
        return str(reply.json()["choices"][0]["message"]["content"])

    assert_the_adapter_answers_differently(answer, job_id)
    # Its checkpoints are whole models too, served the same way.
    assert answer(f"{job_id}:checkpoint-2")
