"""Jobs over two GPUs through the API: FSDP (GPU only: on CPU it would silently train as plain
DDP) and DDP over NCCL. Skipped without two CUDA GPUs (tests/gpu/conftest.py).

What the CPU tests (tests/integration/test_multi_rank.py) show for DDP and DeepSpeed over gloo,
these show on GPUs: both ranks train one job, every completion is recorded once, the adapter
is saved whole, and a job that loses its worker resumes from its (FSDP) checkpoint.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import tarfile
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.stack import LocalStack
from tests.gpu.conftest import GPUS_PER_JOB
from tests.integration.helpers import all_pages, create_job, upload_jsonl, wait_for, wait_until
from tests.integration.multi_rank_jobs import assert_every_completion_once, worker_logs
from tests.integration.multi_rank_jobs import job_request as cpu_job_request
from tests.processes import rank_pids, training_processes, wait_gone

pytestmark = pytest.mark.integration

# One row over two ranks: rank 0's share is empty. Under FSDP it must still call generate()
# as often as rank 1 (each forward gathers the layers' weights from every rank), or rank 1
# waits forever (workers/training/evaluation.py, generate_calls).
VALIDATION_ROWS = [{"prompt": "Spell cat:"}]


def job_request(
    client: httpx.Client, engine: str, *, train_steps: int, checkpoint_every: int
) -> dict[str, Any]:
    """The CPU tests' two-rank job (2 prompts x 4 generations per step, a counting reward
    that prints), on two GPUs under ``engine``."""
    request = cpu_job_request(
        client, train_steps=train_steps, checkpoint_every=checkpoint_every, num_devices=GPUS_PER_JOB
    )
    request["engine"] = engine
    return request


def adapter_tensors(client: httpx.Client, job_id: str) -> dict[str, Any]:
    """The job's adapter as the API serves it: tensor name -> tensor."""
    from safetensors.torch import load

    response = client.get(f"/v1/jobs/{job_id}/adapter.tar.gz")
    assert response.status_code == 200, response.text
    with tarfile.open(fileobj=io.BytesIO(response.content)) as archive:
        member = archive.extractfile(f"{job_id}-adapter/adapter_model.safetensors")
        assert member is not None
        return load(member.read())


GPU_DEVICE_FILE = re.compile(r"/dev/nvidia\d+$")


def gpu_device_files(pid: int) -> set[str]:
    """The GPU device files (/dev/nvidia0, ...) process ``pid`` holds open: a process with a
    CUDA context holds its GPU's. Read from /proc, so unlike nvidia-smi's process list (host
    pids, or none, inside a container) it names this machine's pids."""
    fd_dir = Path(f"/proc/{pid}/fd")
    opened = set()
    for fd in fd_dir.iterdir():
        with contextlib.suppress(OSError):  # closed meanwhile
            target = os.readlink(fd)
            if GPU_DEVICE_FILE.match(target):
                opened.add(target)
    return opened


def assert_ranks_on_gpus(stack: LocalStack, client: httpx.Client, job_id: str) -> None:
    """While the job trains, both ranks hold a CUDA context (not two CPU processes)."""
    wait_until(client, job_id, lambda job: job["steps_completed"] >= 1, timeout_s=900)
    ranks = rank_pids(stack.workers[0].pid)
    assert sorted(ranks) == list(range(GPUS_PER_JOB)), ranks
    on_gpus = {rank: gpu_device_files(pid) for rank, pid in ranks.items()}
    assert all(on_gpus.values()), on_gpus


def test_an_fsdp_job_trains_on_two_gpus_and_saves_the_whole_adapter(
    gpu_stack: LocalStack, gpu_client: httpx.Client
) -> None:
    """FSDP2 shards the base weights and the adapter over both GPUs; generation (training's
    and validation's) gathers them layer by layer on every rank together. The saved adapter
    must be whole (a FULL_STATE_DICT gathered from the shards), of the same tensors as a DDP
    job's, and trained (LoRA's B starts at zero)."""
    train_steps = 4
    adapters: dict[str, dict[str, Any]] = {}
    for engine in ("ddp", "fsdp"):
        request = job_request(gpu_client, engine, train_steps=train_steps, checkpoint_every=2)
        if engine == "fsdp":
            request["validation_dataset_id"] = upload_jsonl(gpu_client, VALIDATION_ROWS)
            request["hyperparameters"]["eval_every"] = 2
        fsdp_ranks_before = worker_logs(gpu_stack).count("engine: fsdp (FSDP2)")
        job_id = str(create_job(gpu_client, request)["id"])
        assert_ranks_on_gpus(gpu_stack, gpu_client, job_id)
        job = wait_for(gpu_client, job_id, timeout_s=1800)
        assert job["status"] == "succeeded", job.get("failure_reason")
        assert (job["num_devices"], job["engine"]) == (GPUS_PER_JOB, engine)
        assert_every_completion_once(gpu_client, job_id, train_steps)
        # Each rank logs what its launcher set up (accelerate's variables, which the Trainer
        # reads): both ranks under FSDP2 for the FSDP job, none for the DDP one.
        fsdp_ranks = worker_logs(gpu_stack).count("engine: fsdp (FSDP2)") - fsdp_ranks_before
        assert fsdp_ranks == (GPUS_PER_JOB if engine == "fsdp" else 0)
        events = all_pages(gpu_client, f"/v1/jobs/{job_id}/events/history")
        assert [e["step"] for e in events if e["kind"] == "checkpoint"] == [2, 4]
        adapters[engine] = adapter_tensors(gpu_client, job_id)
        if engine == "fsdp":
            evals = gpu_client.get(f"/v1/jobs/{job_id}/evals").json()["data"]
            assert [e["step"] for e in evals] == [2, train_steps]
            for evaluation in evals:
                assert evaluation["prompts"] == len(VALIDATION_ROWS)
                assert evaluation["reward_functions"]["counting"]["errors"] == 0
        wait_gone(list(training_processes(gpu_stack.workers[0].pid)))

    ddp, fsdp = adapters["ddp"], adapters["fsdp"]
    assert ddp and sorted(fsdp) == sorted(ddp)
    for name, tensor in fsdp.items():
        # Whole, not one rank's shard (a shard has half the rows of its first dimension).
        assert tensor.shape == ddp[name].shape, name
    lora_b = [tensor for name, tensor in fsdp.items() if "lora_B" in name]
    assert lora_b and any(tensor.abs().sum().item() > 0 for tensor in lora_b)


def test_a_lost_fsdp_job_resumes_from_its_checkpoint(
    gpu_stack: LocalStack, gpu_client: httpx.Client
) -> None:
    """The worker dies mid-run; its ranks die with it, and the next worker resumes the job
    from its last FSDP checkpoint (the adapter's weights and optimizer state), on two GPUs."""
    worker = gpu_stack.workers[0]
    train_steps = 8
    request = job_request(gpu_client, "fsdp", train_steps=train_steps, checkpoint_every=2)
    job_id = str(create_job(gpu_client, request)["id"])
    wait_until(gpu_client, job_id, lambda job: job["steps_completed"] >= 3, timeout_s=1200)
    launched = list(training_processes(worker.pid))
    assert len(rank_pids(worker.pid)) == GPUS_PER_JOB
    gpu_stack.kill_worker(worker)
    wait_gone(launched)
    fsdp_ranks_before = worker_logs(gpu_stack).count("engine: fsdp (FSDP2)")
    gpu_stack.start_worker()
    job = wait_for(gpu_client, job_id, timeout_s=1800)
    assert job["status"] == "succeeded", job.get("failure_reason")
    assert (job["num_devices"], job["engine"]) == (GPUS_PER_JOB, "fsdp")
    events = all_pages(gpu_client, f"/v1/jobs/{job_id}/events/history")
    resumed = [e["data"]["checkpoint_step"] for e in events if e["kind"] == "resumed"]
    assert len(resumed) == 1 and resumed[0] in (2, 4), resumed
    assert_every_completion_once(gpu_client, job_id, train_steps)
    # The resumed run was FSDP on both GPUs again, and started from that checkpoint.
    assert worker_logs(gpu_stack).count("engine: fsdp (FSDP2)") - fsdp_ranks_before == 2
    assert any(
        f"checkpoint-{resumed[0]}" in line
        for line in worker_logs(gpu_stack).splitlines()
        if "resume from" in line
    )


def test_a_cancelled_two_gpu_job_leaves_no_rank_behind(
    gpu_stack: LocalStack, gpu_client: httpx.Client
) -> None:
    """Cancel stops both ranks, which free both GPUs."""
    request = job_request(gpu_client, "fsdp", train_steps=500, checkpoint_every=500)
    job_id = str(create_job(gpu_client, request)["id"])
    wait_until(gpu_client, job_id, lambda job: job["steps_completed"] >= 1, timeout_s=1200)
    launched = list(training_processes(gpu_stack.workers[0].pid))
    assert len(rank_pids(gpu_stack.workers[0].pid)) == GPUS_PER_JOB
    assert gpu_client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    job = wait_for(gpu_client, job_id, timeout_s=300)
    assert job["status"] == "cancelled"
    wait_gone(launched, timeout_s=120)
