"""Job creation refuses what vLLM and the trainer cannot fit on any running worker's GPU: the
workers are adverts in Redis (a GPU worker that generates with vLLM, written as a worker
writes it), the model a config.json under RFT_MODEL_ROOTS."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.stack import LocalStack
from service.work_queue.queue import advertise_capacity, withdraw_capacity
from tests.api.conftest import idle_model_root
from tests.integration.helpers import upload_jsonl
from tests.unit.test_memory_plan import QWEN25_7B, QWEN25_14B

REWARD = {"one": {"source": "def one(prompt, completion, example):\n    return 1.0\n"}}


@pytest.fixture(scope="module")
def models(idle_stack: LocalStack) -> Iterator[Path]:
    """The models' config.json files, under the idle stack's RFT_MODEL_ROOTS."""
    root = idle_model_root(idle_stack) / "gpu-fit"
    (root / "qwen14b").mkdir(parents=True)
    (root / "qwen14b" / "config.json").write_text(json.dumps(QWEN25_14B))
    # A 7B reward model (~14 GiB in bf16), as its pre-flight wants one: a classifier, 1 label.
    (root / "reward7b").mkdir()
    reward = {**QWEN25_7B, "architectures": ["Qwen2ForSequenceClassification"], "num_labels": 1}
    (root / "reward7b" / "config.json").write_text(json.dumps(reward))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def api(idle_api: tuple[LocalStack, httpx.Client], models: Path) -> tuple[LocalStack, httpx.Client]:
    """An API without workers (the API tests' idle stack): the test's adverts are the only
    ones."""
    return idle_api


@pytest.fixture
def gpu_worker(api: tuple[LocalStack, httpx.Client]) -> Iterator[Any]:
    stack, _ = api
    assert stack.redis_url
    names: list[str] = []

    def advertise(name: str, devices: int = 1, **advert: Any) -> None:
        advertise_capacity(stack.redis_url or "", name, devices, 60, "cuda", **advert)
        names.append(name)

    yield advertise
    for name in names:
        withdraw_capacity(stack.redis_url, name)


def create(
    client: httpx.Client, models: Path, hyperparameters: dict[str, Any], **job: Any
) -> httpx.Response:
    dataset_id = upload_jsonl(client, [{"prompt": f"Say {w}:"} for w in "abcd"])
    return client.post(
        "/v1/jobs",
        json={
            "dataset_id": dataset_id,
            "base_model": str(models / "qwen14b"),
            "reward_functions": REWARD,
            "hyperparameters": {"max_prompt_length": 512, **hyperparameters},
            **job,
        },
    )


def test_a_job_no_gpu_can_hold_is_400_with_the_arithmetic(
    api: tuple[LocalStack, httpx.Client], models: Path, gpu_worker: Any
) -> None:
    _, client = api
    gpu_worker("gpu-80", gpu_memory_gib=80.0, vllm=True)
    before = len(client.get("/v1/jobs", params={"limit": 1000}).json()["data"])
    refused = create(client, models, {})
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"] == "JobDoesNotFitGpu"
    detail = refused.json()["detail"]
    assert "weights 27.5 GiB + KV 6.0 GiB + vLLM runtime 2.0 GiB + trainer 48.1 GiB" in detail
    assert "= 83.6 GiB > device 80.0 GiB" in detail
    assert "vllm_tensor_parallel_size" in detail and "micro_batch_size" in detail
    assert len(client.get("/v1/jobs", params={"limit": 1000}).json()["data"]) == before
    # What the message suggests does fit: smaller micro-batches (the medium preset), or
    # vLLM asleep while the trainer steps.
    assert create(client, models, {"preset": "medium"}).status_code == 201
    assert create(client, models, {"vllm_sleep_mode": True}).status_code == 201


def test_the_largest_gpu_of_the_workers_that_could_take_it_decides(
    api: tuple[LocalStack, httpx.Client], models: Path, gpu_worker: Any
) -> None:
    _, client = api
    gpu_worker("gpu-48", gpu_memory_gib=48.0, vllm=True)
    gpu_worker("gpu-141", gpu_memory_gib=141.0, vllm=True)
    assert create(client, models, {}).status_code == 201


def test_a_reward_model_counts_against_the_gpu(
    api: tuple[LocalStack, httpx.Client], models: Path, gpu_worker: Any
) -> None:
    """Each rank keeps the job's reward models on its device: a 14B job that fits 80 GB with
    the medium preset does not with a 7B reward model beside it."""
    _, client = api
    gpu_worker("gpu-80-rm", gpu_memory_gib=80.0, vllm=True)
    assert create(client, models, {"preset": "medium"}).status_code == 201
    judged = {**REWARD, "judge": {"model": str(models / "reward7b")}}
    refused = create(client, models, {"preset": "medium"}, reward_functions=judged)
    assert refused.status_code == 400, refused.text
    assert "reward models 14.2" in refused.json()["detail"]
    assert "smaller reward model" in refused.json()["detail"]


def test_two_gpus_with_tensor_parallelism(
    api: tuple[LocalStack, httpx.Client], models: Path, gpu_worker: Any
) -> None:
    _, client = api
    gpu_worker("gpu-48x2", devices=2, gpu_memory_gib=48.0, vllm=True)
    alone = create(client, models, {"preset": "medium"})
    assert alone.status_code == 400 and "> device 48.0 GiB" in alone.json()["detail"]
    split = {"preset": "medium", "vllm_tensor_parallel_size": 2}
    assert create(client, models, split, num_devices=2, engine="fsdp").status_code == 201
    odd = create(client, models, split, num_devices=1)
    assert odd.status_code == 422 and "must divide num_devices" in odd.text


def test_nothing_is_checked_where_vllm_does_not_generate_on_a_known_gpu(
    api: tuple[LocalStack, httpx.Client], models: Path, gpu_worker: Any
) -> None:
    _, client = api
    # A GPU worker that generates with transformers, or one whose memory is unknown: the job
    # may run there, where this arithmetic does not hold.
    gpu_worker("gpu-80", gpu_memory_gib=80.0, vllm=True)
    gpu_worker("gpu-transformers", gpu_memory_gib=80.0, vllm=False)
    assert create(client, models, {}).status_code == 201
    withdraw_capacity(api[0].redis_url or "", "gpu-transformers")
    gpu_worker("gpu-unknown", vllm=True)
    assert create(client, models, {}).status_code == 201


@pytest.mark.parametrize(
    ("option", "named"),
    [
        ({"quantization": "4bit"}, "quantization '4bit' (QLoRA"),
        ({"optimizer": "adamw_8bit"}, "optimizer 'adamw_8bit'"),
        ({"attn_implementation": "flash_attention_2"}, "flash_attention_2"),
    ],
)
def test_cuda_only_options_are_refused_where_every_worker_is_cpu_only(
    api: tuple[LocalStack, httpx.Client], models: Path, option: dict[str, Any], named: str
) -> None:
    stack, client = api
    assert stack.redis_url
    # No worker running: the job is accepted and waits for one (a GPU worker may come).
    assert create(client, models, option).status_code == 201
    advertise_capacity(stack.redis_url, "cpu-only", 1, 60, "cpu")
    try:
        refused = create(client, models, option)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"] == "OptionNeedsCuda"
        detail = refused.json()["detail"]
        assert named in detail and "need a CUDA GPU" in detail, detail
        assert "1 running worker(s)" in detail, detail
    finally:
        withdraw_capacity(stack.redis_url, "cpu-only")


def test_cuda_only_options_are_accepted_where_a_gpu_worker_runs(
    api: tuple[LocalStack, httpx.Client], models: Path, gpu_worker: Any
) -> None:
    stack, client = api
    assert stack.redis_url
    advertise_capacity(stack.redis_url, "cpu-too", 1, 60, "cpu")
    gpu_worker("gpu-any", gpu_memory_gib=None, vllm=False)
    try:
        accepted = create(client, models, {"quantization": "4bit", "optimizer": "adamw_8bit"})
        assert accepted.status_code == 201, accepted.text
        assert accepted.json()["hyperparameters"]["quantization"] == "4bit"
    finally:
        withdraw_capacity(stack.redis_url, "cpu-too")


def test_qlora_with_full_fine_tuning_is_422(
    api: tuple[LocalStack, httpx.Client], models: Path
) -> None:
    _, client = api
    refused = create(client, models, {"adapter": "full", "quantization": "4bit"})
    assert refused.status_code == 422
    assert "cannot be combined with adapter 'full'" in refused.text
