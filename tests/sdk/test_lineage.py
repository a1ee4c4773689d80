"""The docs' two-stage run through the SDK: stage 1 rewards the format, stage 2 continues
from stage 1's adapter with a correctness reward (docs/guides/sft-and-stages.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml

import rft
from rft.cli.files import read_job_spec
from service.stack import LocalStack
from tests.sdk.conftest import FinishedJob
from tests.sdk.job_inputs import QUICK_HYPERPARAMETERS, create_request_body

FORMAT = (
    "def starts_upper(prompt, completion, example):\n    return float(completion[:1].isupper())\n"
)
CORRECT = (
    "def names_topic(prompt, completion, example):\n"
    "    return float(example['topic'] in completion)\n"
)


def test_a_second_stage_continues_from_the_first(
    stack: LocalStack, finished_job: FinishedJob, finished_client: rft.Client
) -> None:
    """Stage 1 is the session's finished job (tests/sdk/conftest.py: 2 steps, a checkpoint at
    each); stage 2 trains from its final adapter, on a dataset of its own."""
    rft_client, api_key, stage1 = finished_client, finished_job.api_key, finished_job.job
    assert stage1.init_from is None
    dataset = rft_client.datasets.upload(
        [{"prompt": f"Write about {topic}:", "topic": topic} for topic in "abcdefgh"],
        name="stage 2",
    )

    stage2 = rft_client.jobs.create(
        dataset=dataset,
        init_from=stage1,
        reward_functions={"names_topic": CORRECT, "starts_upper": FORMAT},
        hyperparameters=QUICK_HYPERPARAMETERS,
    )
    assert (stage2.init_from, stage2.parent_job_id) == (stage1.id, stage1.id)
    assert stage2.parent_checkpoint_step is None and not stage2.init_from_optimizer
    # Base model and LoRA shape are stage 1's (a request that sets another shape: a 400,
    # tests/integration/test_lineage.py).
    assert stage2.base_model == "rft-tiny"
    assert stage2.hyperparameters["lora_rank"] == stage1.hyperparameters["lora_rank"]
    stage2 = rft_client.jobs.wait(stage2.id, timeout=300, poll_interval=0.2)
    assert stage2.status == rft.JobStatus.SUCCEEDED, stage2.failure_reason

    async def from_a_checkpoint() -> rft.Job:
        async with rft.AsyncClient(api_key=api_key, base_url=stack.base_url) as client:
            job = await client.jobs.create(
                dataset=dataset.id,
                init_from=f"{stage1.id}:checkpoint-{stage1.steps_completed}",
                init_from_optimizer=True,
                reward_functions={"names_topic": CORRECT},
                hyperparameters=QUICK_HYPERPARAMETERS,
            )
            await client.jobs.cancel(job.id)
            return job

    job = asyncio.run(from_a_checkpoint())
    assert job.init_from == f"{stage1.id}:checkpoint-2" and job.init_from_optimizer
    assert job.parent_checkpoint_step == 2


def test_init_from_takes_a_job_or_its_id_and_leaves_the_base_model_to_the_server(
    dataset: rft.Dataset, idle_job: rft.Job
) -> None:
    body = create_request_body(base_model=None, init_from=idle_job)
    assert body["init_from"] == idle_job.id and "base_model" not in body
    assert "init_from_optimizer" not in body
    body = create_request_body(
        base_model="rft-tiny", init_from=f"{idle_job.id}:checkpoint-3", init_from_optimizer=True
    )
    assert (body["base_model"], body["init_from"]) == ("rft-tiny", f"{idle_job.id}:checkpoint-3")
    assert body["init_from_optimizer"] is True
    fresh = create_request_body(base_model=None)
    assert "init_from" not in fresh and "base_model" not in fresh


def test_a_job_file_names_init_from(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    spec = {"dataset_id": "ds_x", "reward_functions": {"f": {"source": FORMAT}}}
    path.write_text(
        yaml.safe_dump({**spec, "init_from": "job_1:checkpoint-4", "init_from_optimizer": True})
    )
    job = read_job_spec(path)
    assert (job["init_from"], job["init_from_optimizer"]) == ("job_1:checkpoint-4", True)
    assert "base_model" not in job
    path.write_text(yaml.safe_dump(spec))
    assert "init_from" not in read_job_spec(path)
