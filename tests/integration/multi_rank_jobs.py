"""The jobs of the two-rank tests (test_multi_rank.py) and what they check on them: a job over
the stack's two ranks, its ranks' processes, its records and its optimizer shards."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from service.stack import LocalStack
from service.work_queue.queue import live_workers
from tests.integration.helpers import all_pages, create_job, upload_jsonl
from tests.layers import needs_module
from tests.processes import rank_pids, training_processes
from tests.tiny import TINY_HYPERPARAMETERS

RANKS = 2
NEEDS_DEEPSPEED = needs_module("deepspeed", "the deepspeed extra")
PROMPTS_PER_STEP = 2
NUM_GENERATIONS = 4
# Prints so that every rank's logs must reach the record; slow enough to act mid-run.
COUNTING_REWARD = (
    "import time\n"
    "def counting(prompts, completions, **kwargs):\n"
    "    time.sleep(0.1)\n"
    "    print(f'scored {len(completions)}')\n"
    "    return [c.count('a') / max(1, len(c)) for c in completions]\n"
)


def worker_logs(stack: LocalStack) -> str:
    """Every worker's log: an earlier test may have replaced the first worker with another."""
    return "".join(
        path.read_text(errors="replace") for path in sorted(stack.log_dir.glob("worker*.log"))
    )


def job_request(
    client: httpx.Client, *, train_steps: int, checkpoint_every: int = 2, num_devices: int = RANKS
) -> dict[str, Any]:
    dataset_id = upload_jsonl(client, [{"prompt": f"Say {w}:"} for w in "abcdefgh"])
    return {
        "dataset_id": dataset_id,
        "num_devices": num_devices,
        "reward_functions": {"counting": {"source": COUNTING_REWARD}},
        "hyperparameters": {
            **TINY_HYPERPARAMETERS,
            "train_steps": train_steps,
            "prompts_per_step": PROMPTS_PER_STEP,
            "num_generations": NUM_GENERATIONS,
            "checkpoint_every": checkpoint_every,
        },
    }


def start_job(
    client: httpx.Client, *, train_steps: int, checkpoint_every: int = 2, num_devices: int = RANKS
) -> str:
    request = job_request(
        client,
        train_steps=train_steps,
        checkpoint_every=checkpoint_every,
        num_devices=num_devices,
    )
    return str(create_job(client, request)["id"])


def wait_for_ranks(root: int, timeout_s: float = 300) -> dict[int, int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ranks = rank_pids(root)
        if len(ranks) == RANKS:
            return ranks
        time.sleep(0.2)
    raise AssertionError(f"{RANKS} ranks did not start: {training_processes(root)}")


def wait_for_worker_capacity(stack: LocalStack, timeout_s: float = 120) -> None:
    """Until the stack's one worker has advertised its devices (it does once it is ready) and
    a worker killed by an earlier test no longer counts (its advert expires)."""
    assert stack.redis_url
    deadline = time.monotonic() + timeout_s
    while [worker.devices for worker in live_workers(stack.redis_url)] != [RANKS]:
        assert time.monotonic() < deadline, "the worker never advertised its devices alone"
        time.sleep(0.2)


def assert_every_completion_once(client: httpx.Client, job_id: str, train_steps: int) -> None:
    """Steps 1..train_steps each recorded once, each with the global batch's completions once
    (every prompt and group position: not twice, as a re-run step or a second rank would)."""
    steps = client.get(f"/v1/jobs/{job_id}/steps").json()["data"]
    assert [s["step"] for s in steps] == list(range(1, train_steps + 1))
    per_step: dict[int, list[tuple[int, int]]] = {}
    for row in all_pages(client, f"/v1/jobs/{job_id}/completions"):
        per_step.setdefault(row["step"], []).append((row["prompt_index"], row["group_position"]))
    expected = sorted((p, g) for p in range(PROMPTS_PER_STEP) for g in range(NUM_GENERATIONS))
    assert {step: sorted(pairs) for step, pairs in per_step.items()} == {
        step: expected for step in range(1, train_steps + 1)
    }


def optimizer_steps(checkpoint: Path) -> dict[str, set[int]]:
    """Each DeepSpeed optimizer shard of ``checkpoint`` (one per rank) -> the step counts its
    optimizer state holds (Adam counts every step it took, per parameter group)."""
    import torch  # only here: the test process needs it to read the shards, nothing else does

    def counts(value: Any) -> set[int]:
        if isinstance(value, dict):
            found = {int(v) for k, v in value.items() if k == "step" and v is not None}
            return found.union(*(counts(v) for k, v in value.items() if k != "step"))
        if isinstance(value, list | tuple):
            return set().union(*(counts(v) for v in value))
        return set()

    shards = sorted(checkpoint.glob("global_step*/*optim_states.pt"))
    return {
        shard.name: counts(torch.load(shard, map_location="cpu", weights_only=False))
        for shard in shards
    }


def assert_devices_fixed(client: httpx.Client, job_id: str, engine: str) -> None:
    """Nothing can give an existing job another world size: no endpoint takes num_devices or
    engine (the config update refuses unknown fields)."""
    for method in ("PATCH", "PUT"):
        response = client.request(
            method, f"/v1/jobs/{job_id}", json={"num_devices": 1, "engine": "ddp"}
        )
        assert response.status_code == 405, response.text
    config = client.get(f"/v1/jobs/{job_id}/config")
    for params in ({}, {"dry_run": "true"}):
        response = client.put(
            f"/v1/jobs/{job_id}/config",
            params=params,
            json={**config.json(), "num_devices": 1, "engine": "ddp"},
            headers={"If-Match": config.headers["ETag"]},
        )
        assert response.status_code == 422, response.text
        assert "num_devices" in response.text
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert (job["num_devices"], job["engine"]) == (RANKS, engine)
