"""A job on one CUDA GPU through the whole stack: what every GPU user runs first. Skipped
without a GPU (tests/gpu/conftest.py).

The CPU tests train in fp32 without activation checkpointing; "auto" turns on bf16 and
activation checkpointing on a GPU, and the adapter then serves chat completions from the GPU.
These show that path end to end: the worker's start-up check accepts the GPU, the rank trains on
it in bf16, the job checkpoints and finishes, and its adapter answers differently from the base.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import httpx
import pytest

from service.stack import LocalStack
from tests.conftest import tenant_client
from tests.gpu.conftest import stack_on_one_gpu
from tests.integration.helpers import (
    A_SHARE,
    all_pages,
    assert_the_adapter_answers_differently,
    chat,
    create_job,
    train_a_share_job,
    upload_jsonl,
    wait_for,
)
from tests.integration.multi_rank_jobs import worker_logs
from tests.layers import skip_without_gpu
from tests.tiny import TINY_HYPERPARAMETERS

pytestmark = pytest.mark.integration

GPUS_NEEDED = 1


@pytest.fixture(scope="module")
def one_gpu_stack() -> Iterator[LocalStack]:
    with stack_on_one_gpu("rft-one-gpu-") as stack:
        yield stack


@pytest.fixture
def one_gpu_client(one_gpu_stack: LocalStack) -> Iterator[httpx.Client]:
    with tenant_client(one_gpu_stack) as http:
        yield http


def training_lines_since(stack: LocalStack, seen: int) -> list[str]:
    """The workers' "training on <device> in <dtype>" lines (one per rank, from
    workers/training/model_options.py), after the first ``seen``."""
    lines = worker_logs(stack).splitlines()
    return [line for line in lines if "training on " in line][seen:]


def test_the_start_up_check_sees_a_usable_gpu() -> None:
    """The worker's one answer to "does this machine have usable CUDA" (workers/training/
    cuda.py) agrees with torch here: the driver lists the GPU, torch can use it, no problem."""
    import torch

    from workers.training.cuda import probe_cuda

    probe = probe_cuda()
    assert probe.problem() is None, probe.problem()
    assert probe.usable_gpus == torch.cuda.device_count() >= 1, probe
    assert probe.driver_gpus >= 1, probe
    assert probe.torch_cuda == torch.version.cuda, probe


def test_a_job_trains_on_one_gpu_in_bf16_and_its_adapter_answers(
    one_gpu_stack: LocalStack, one_gpu_client: httpx.Client
) -> None:
    job = train_a_share_job(one_gpu_client, train_steps=6, checkpoint_every=3)
    job_id = str(job["id"])
    logs = worker_logs(one_gpu_stack)
    trained_on = [line for line in logs.splitlines() if "training on " in line]
    assert trained_on, logs[-3000:]
    assert "training on cuda" in trained_on[-1], trained_on
    assert "in bfloat16" in trained_on[-1], trained_on
    assert "activation checkpointing on" in trained_on[-1], trained_on

    steps = all_pages(one_gpu_client, f"/v1/jobs/{job_id}/steps")
    assert [step["step"] for step in steps] == list(range(1, 7))
    assert all(step["reward_functions"]["a_share"]["errors"] == 0 for step in steps), steps
    events = all_pages(one_gpu_client, f"/v1/jobs/{job_id}/events/history")
    assert [e["step"] for e in events if e["kind"] == "checkpoint"] == [3, 6]

    one_gpu_stack.start_inference()

    def answer(model: str) -> str:
        response = chat(one_gpu_client, model)
        assert response.status_code == 200, response.text
        return str(response.json()["choices"][0]["message"]["content"])

    assert_the_adapter_answers_differently(answer, job_id)


def test_a_qlora_job_with_the_8bit_optimizer_trains_on_one_gpu(
    one_gpu_stack: LocalStack, one_gpu_client: httpx.Client
) -> None:
    """QLoRA: the frozen base in 4-bit NF4 (bitsandbytes), a bf16 LoRA adapter over it, and
    bitsandbytes' 8-bit AdamW. Needs the `qlora` extra on the worker."""
    if importlib.util.find_spec("bitsandbytes") is None:
        skip_without_gpu("QLoRA: the qlora extra (bitsandbytes) is not installed")
    job = train_a_share_job(
        one_gpu_client, train_steps=3, quantization="4bit", optimizer="adamw_8bit"
    )
    trained_on = [
        line for line in worker_logs(one_gpu_stack).splitlines() if "training on " in line
    ]
    assert "over a 4-bit NF4 base (QLoRA)" in trained_on[-1], trained_on
    assert "adamw_bnb_8bit" in trained_on[-1], trained_on
    steps = all_pages(one_gpu_client, f"/v1/jobs/{job['id']}/steps")
    assert [step["step"] for step in steps] == [1, 2, 3]
    assert all(step["loss"] is not None for step in steps), steps


def test_an_sft_warm_up_then_a_grpo_job_from_it_on_one_gpu(
    one_gpu_stack: LocalStack, one_gpu_client: httpx.Client
) -> None:
    """Issue 23's pipeline on a GPU: a supervised job (TRL's SFTTrainer, bf16), then a GRPO
    job that starts from its adapter (init_from). Each says where it trained and in what."""
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"Name a fruit ({i}):"},
                {"role": "assistant", "content": "banana"},
            ]
        }
        for i in range(16)
    ]
    seen = len(training_lines_since(one_gpu_stack, 0))
    sft = create_job(
        one_gpu_client,
        {
            "dataset_id": upload_jsonl(one_gpu_client, rows),
            "method": "sft",
            "hyperparameters": {"preset": "tiny-cpu", "train_steps": 6, "batch_size": 8},
        },
    )
    finished = wait_for(one_gpu_client, str(sft["id"]), timeout_s=300)
    assert finished["status"] == "succeeded", finished["failure_reason"]
    (sft_trained_on,) = training_lines_since(one_gpu_stack, seen)
    assert "training on cuda" in sft_trained_on and "in bfloat16" in sft_trained_on
    seen += 1
    losses = [s["loss"] for s in all_pages(one_gpu_client, f"/v1/jobs/{sft['id']}/steps")]
    assert len(losses) == 6 and losses[-1] < losses[0], losses

    prompts = [{"prompt": [{"role": "user", "content": f"Name a fruit ({i}):"}]} for i in range(8)]
    grpo = create_job(
        one_gpu_client,
        {
            "dataset_id": upload_jsonl(one_gpu_client, prompts),
            "reward_functions": {"a_share": {"source": A_SHARE}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 2},
            "init_from": str(sft["id"]),
        },
    )
    finished = wait_for(one_gpu_client, str(grpo["id"]), timeout_s=300)
    assert finished["status"] == "succeeded", finished["failure_reason"]
    assert finished["parent_job_id"] == sft["id"]
    (grpo_trained_on,) = training_lines_since(one_gpu_stack, seen)
    assert "training on cuda" in grpo_trained_on and "in bfloat16" in grpo_trained_on
    assert "from init_from's adapter" in grpo_trained_on


def test_full_fine_tuning_on_one_gpu(
    one_gpu_stack: LocalStack, one_gpu_client: httpx.Client
) -> None:
    train_a_share_job(one_gpu_client, train_steps=2, adapter="full", learning_rate=2e-3)
    trained_on = [
        line for line in worker_logs(one_gpu_stack).splitlines() if "training on " in line
    ]
    assert "training on cuda" in trained_on[-1] and "every weight" in trained_on[-1], trained_on
