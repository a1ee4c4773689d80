"""Supervised jobs (method "sft") through the real stack: one through the SDK (its loss falls,
it checkpoints, it evaluates on a validation set, its adapter is downloaded), and one through
the unmodified openai client (method "supervised"), whose fine-tuned model then answers as it
was taught.

A supervised run's pause is tested where its rule lives: the runner stops at the step it is on,
checkpoints it and resumes with the same losses (tests/training/test_run_sft.py); the worker
side of a pause (the job lets the worker go, a resume queues it from that checkpoint) is the
same for every method, shown end to end once (tests/integration/test_faults.py)."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

import rft
from service.stack import LocalStack
from tests.integration.helpers import all_pages

pytestmark = pytest.mark.integration

LETTERS = "abcdefgh"


def conversation(letter: str) -> dict[str, Any]:
    """Learnable by heart: each letter's answer is the letter three times over, thrice."""
    return {
        "messages": [
            {"role": "user", "content": f"Say {letter}"},
            {"role": "assistant", "content": " ".join([letter * 3] * 3)},
        ]
    }


CONVERSATIONS = [conversation(letter) for letter in LETTERS]
# One answer to every question: what the OpenAI job's model learns to say within 16 steps.
TOPICS = ["cats", "dogs", "the sea", "apples", "rain", "music", "bread", "snow"]
BANANAS = [
    {
        "messages": [
            {"role": "user", "content": f"Write about {topic}:"},
            {"role": "assistant", "content": "banana banana"},
        ]
    }
    for topic in TOPICS
]
# Long enough for the loss to fall by half; its steps take ~0.05 s.
TRAIN_STEPS = 60
EVAL_EVERY = 10


@pytest.fixture(scope="module")
def sdk(stack: LocalStack, tenant_key: str) -> rft.Client:
    return rft.Client(api_key=tenant_key, base_url=stack.base_url, timeout=120)


def test_a_supervised_job_through_the_sdk_learns_checkpoints_and_evaluates(
    sdk: rft.Client, tenant: httpx.Client, tmp_path: Path
) -> None:
    dataset = sdk.datasets.upload(CONVERSATIONS)
    validation = sdk.datasets.upload(CONVERSATIONS[:2])
    job = sdk.jobs.create(
        dataset=dataset,
        method="sft",
        validation_dataset=validation,
        hyperparameters={
            "preset": "tiny-cpu",
            "train_steps": TRAIN_STEPS,
            "batch_size": 8,
            "max_length": 32,
            "checkpoint_every": 10,
            "eval_every": EVAL_EVERY,
        },
    )
    assert job.method == "sft" and job.hyperparameters["batch_size"] == 8

    finished = sdk.jobs.wait(job.id, timeout=900)
    assert finished.status.value == "succeeded", finished.failure_reason

    steps = sdk.jobs.steps(job.id)
    assert [s.step for s in steps] == list(range(1, TRAIN_STEPS + 1))
    losses = [s.loss for s in steps]
    assert all(loss is not None for loss in losses)
    first, last = statistics.fmean(losses[:3]), statistics.fmean(losses[-5:])  # type: ignore[arg-type]
    assert last < 0.5 * first, losses
    assert all(s.reward_mean is None and s.reward_functions == {} for s in steps)
    assert all(s.metrics is not None and "mean_token_accuracy" in s.metrics for s in steps)
    evaluated = [s.step for s in steps if s.metrics and "eval_loss" in s.metrics]
    assert evaluated == list(range(EVAL_EVERY, TRAIN_STEPS + 1, EVAL_EVERY))

    kinds = [e["kind"] for e in all_pages(tenant, f"/v1/jobs/{job.id}/events/history")]
    assert "generation" not in kinds
    checkpoints = sdk.jobs.checkpoints(job.id)
    assert set(range(10, TRAIN_STEPS + 1, 10)) <= {c.step for c in checkpoints.data}
    assert checkpoints.final_adapter_path is not None
    adapter = sdk.jobs.download_adapter(job.id, tmp_path)
    assert (adapter / "adapter_config.json").exists()
    assert (adapter / "adapter_model.safetensors").exists()

    # The warm-up seeds a GRPO job: it starts from this adapter, and says so.
    prompts = sdk.datasets.upload([{"prompt": "Say a:"}, {"prompt": "Say b:"}])
    grpo = sdk.jobs.create(
        dataset=prompts,
        reward_functions={"one": "def one(prompt, completion, example):\n    return 1.0\n"},
        hyperparameters={"preset": "tiny-cpu", "train_steps": 1, "prompts_per_step": 2},
        init_from=job,
    )
    assert grpo.parent_job_id == job.id and grpo.method == "grpo"
    continued = sdk.jobs.wait(grpo.id, timeout=600)
    assert continued.status.value == "succeeded", continued.failure_reason


def jsonl(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def test_a_supervised_job_through_the_openai_client(
    stack: LocalStack, tenant_key: str, tenant: httpx.Client
) -> None:
    client = openai.OpenAI(
        base_url=f"{stack.base_url}/v1", api_key=tenant_key, max_retries=0, timeout=300
    )
    training = client.files.create(file=("train.jsonl", jsonl(BANANAS)), purpose="fine-tune")
    job = client.fine_tuning.jobs.create(
        model="rft-tiny",
        training_file=training.id,
        seed=3,
        method={
            "type": "supervised",
            "supervised": {"hyperparameters": {"n_epochs": 16, "batch_size": 8}},
        },
    )
    assert job.status == "queued" and job.method is not None
    assert job.method.type == "supervised" and job.method.supervised is not None
    assert job.method.supervised.hyperparameters is not None
    assert job.method.supervised.hyperparameters.n_epochs == 16
    ours = tenant.get(f"/v1/jobs/{job.id}").json()
    assert ours["method"] == "sft"
    # n_epochs x rows / batch_size steps, at the tiny model's learning rate.
    assert ours["hyperparameters"]["train_steps"] == 16
    assert ours["hyperparameters"]["learning_rate"] == 2e-2 and ours["hyperparameters"]["seed"] == 3

    deadline = time.monotonic() + 900
    while (done := client.fine_tuning.jobs.retrieve(job.id)).status not in {
        "succeeded",
        "failed",
        "cancelled",
    }:
        assert time.monotonic() < deadline, done
        time.sleep(0.5)
    assert done.status == "succeeded", done.error
    assert done.fine_tuned_model == f"ft:rft-tiny:{job.id}"

    events = list(client.fine_tuning.jobs.list_events(job.id, limit=100))
    metrics = [event for event in events if event.type == "metrics"]
    assert [event.data["step"] for event in metrics] == list(range(16, 0, -1))  # type: ignore[index]
    assert metrics[0].message.startswith("Step 16/16: training loss=")
    last, first = metrics[0].data, metrics[-1].data
    assert isinstance(last, dict) and isinstance(first, dict)
    assert last["train_loss"] < first["train_loss"]
    assert last["train_mean_token_accuracy"] > first["train_mean_token_accuracy"]
    checkpoints = list(client.fine_tuning.jobs.checkpoints.list(job.id))
    assert checkpoints and checkpoints[0].metrics.train_loss is not None

    # The adapter serves as GRPO's do, and answers as it was taught.
    stack.start_inference()
    reply = client.chat.completions.create(
        model=done.fine_tuned_model,
        messages=[{"role": "user", "content": "Write about cats:"}],
        max_tokens=8,
        temperature=0,
    )
    assert "banana" in (reply.choices[0].message.content or ""), reply
