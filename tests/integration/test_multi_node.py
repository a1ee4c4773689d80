"""One job over two machines, emulated by two worker processes on this one.

Each worker can give a job 1 device (RFT_WORKER_DEVICES=1); the jobs here ask for 2 nodes of
1 device each, so they must be placed on both workers at once: two launchers (torchrun
--nnodes 2), one per worker, meeting at node 0's address. Node 0's worker records the run;
losing the other worker sends the job back to the queue, and it resumes from its checkpoint.
A job that cannot be placed whole waits and says so: that rule is tested at the row, without
training (tests/recording/test_placement.py).
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.stack import LocalStack
from service.work_queue.queue import live_workers
from tests.conftest import stack_of_its_own, tenant_client
from tests.integration.helpers import all_pages, create_job, wait_for, wait_until
from tests.integration.multi_rank_jobs import (
    NEEDS_DEEPSPEED,
    NUM_GENERATIONS,
    PROMPTS_PER_STEP,
    job_request,
)
from tests.processes import rank_pids, training_processes, wait_gone

pytestmark = pytest.mark.integration

NODES = 2
PLACEMENT_TIMEOUT_S = 8
CONSTANT_REWARD = (
    "def constant(prompts, completions, **kwargs):\n    return [0.5] * len(completions)\n"
)


@pytest.fixture(scope="module")
def nodes_stack(shared_model_cache: Path) -> Iterator[LocalStack]:
    with stack_of_its_own(
        "rft-multi-node-",
        workers=NODES,
        env={
            "RFT_WORKER_DEVICES": "1",
            "RFT_WORKER_ADDRESS": "127.0.0.1",
            "RFT_WORKER_LEASE_S": "6",
            "RFT_PLACEMENT_TIMEOUT_S": str(PLACEMENT_TIMEOUT_S),
            "OMP_NUM_THREADS": "1",
        },
        model_cache=shared_model_cache,
    ) as stack:
        yield stack


@pytest.fixture
def nodes_client(nodes_stack: LocalStack) -> Iterator[httpx.Client]:
    with tenant_client(nodes_stack) as http:
        yield http


def start_two_node_job(client: httpx.Client, *, train_steps: int, checkpoint_every: int) -> str:
    request = job_request(
        client, train_steps=train_steps, checkpoint_every=checkpoint_every, num_devices=1
    )
    return str(create_job(client, {**request, "num_nodes": NODES})["id"])


def running_two_node_job(client: httpx.Client) -> str:
    """A long 2-node job that has recorded its first step (both nodes' ranks run)."""
    job_id = start_two_node_job(client, train_steps=200, checkpoint_every=100)
    wait_until(client, job_id, lambda job: job["steps_completed"] >= 1, timeout_s=600)
    return job_id


def events(client: httpx.Client, job_id: str) -> list[dict[str, Any]]:
    return all_pages(client, f"/v1/jobs/{job_id}/events/history")


def wait_for_event(client: httpx.Client, job_id: str, kind: str, timeout_s: float) -> None:
    wait_until(
        client,
        job_id,
        lambda job: any(e["kind"] == kind for e in events(client, job_id)),
        timeout_s=timeout_s,
    )


def every_training_process(stack: LocalStack) -> list[int]:
    return [pid for worker in stack.workers for pid in training_processes(worker.pid)]


def test_more_nodes_than_live_workers_is_refused(
    nodes_stack: LocalStack, nodes_client: httpx.Client
) -> None:
    wait_for_adverts(nodes_stack)
    request = job_request(nodes_client, train_steps=2, num_devices=1)
    response = nodes_client.post("/v1/jobs", json={**request, "num_nodes": NODES + 1})
    assert response.status_code == 400
    assert f"num_nodes={NODES + 1}" in response.text
    assert f"{NODES} running worker(s)" in response.text


def wait_for_adverts(stack: LocalStack, timeout_s: float = 120) -> None:
    assert stack.redis_url
    deadline = time.monotonic() + timeout_s
    while len(live_workers(stack.redis_url)) < NODES:
        assert time.monotonic() < deadline, "the workers never advertised their devices"
        time.sleep(0.2)


def test_a_two_node_job_pauses_resumes_updates_live_and_outlives_a_lost_node(
    nodes_stack: LocalStack, nodes_client: httpx.Client
) -> None:
    """One job over both workers, through the lifecycle a user drives and a machine lost: a
    live config update reaches both nodes' ranks at one step boundary, pause lets both nodes
    go, resume places it on two again; then the worker running rank 1 is killed (a lost
    machine): node 0 sees the node lost and stops its own ranks, the job goes back to the
    queue and, once a replacement machine is up, resumes from its last checkpoint on two
    workers. Every completion of every step is recorded once, by node 0."""
    train_steps = 14
    checkpoint_every = 2
    worker_logs = list(nodes_stack.log_dir.glob("worker*.log"))
    log_starts = {path.name: path.stat().st_size for path in worker_logs}
    pids = {str(worker.pid) for worker in nodes_stack.workers}
    job_id = start_two_node_job(
        nodes_client, train_steps=train_steps, checkpoint_every=checkpoint_every
    )
    wait_until(nodes_client, job_id, lambda job: job["steps_completed"] >= 2, timeout_s=600)
    updated = nodes_client.put(
        f"/v1/jobs/{job_id}/config",
        json={"reward_functions": {"constant": {"source": CONSTANT_REWARD}}},
        headers={"If-Match": "*"},
    )
    assert updated.status_code == 200, updated.text
    applies_from = updated.json()["applies_from_step"]
    wait_until(nodes_client, job_id, lambda job: job["applied_config_version"] == 2)
    assert nodes_client.post(f"/v1/jobs/{job_id}/pause").status_code == 200
    wait_for_event(nodes_client, job_id, "paused", timeout_s=300)
    wait_gone(every_training_process(nodes_stack))  # both nodes let go
    paused_at = nodes_client.get(f"/v1/jobs/{job_id}").json()["steps_completed"]
    assert nodes_client.post(f"/v1/jobs/{job_id}/resume").status_code == 200

    # Losing a node: a checkpoint after the resume's, then node 1's machine dies.
    wait_until(
        nodes_client,
        job_id,
        lambda job: job["steps_completed"] >= paused_at + checkpoint_every + 1,
        timeout_s=600,
    )
    node_1 = next(worker for worker in nodes_stack.workers if 1 in rank_pids(worker.pid))
    launched = every_training_process(nodes_stack)
    nodes_stack.kill_worker(node_1)
    # Node 1's ranks die with their worker; node 0 sees the node lost and stops its own.
    wait_gone(launched)
    wait_for_event(nodes_client, job_id, "node_lost", timeout_s=300)
    lost_at = nodes_client.get(f"/v1/jobs/{job_id}").json()["steps_completed"]
    replacement = nodes_stack.start_worker()  # a new machine: the job is placed on two again
    pids.add(str(replacement.pid))
    job = wait_for(nodes_client, job_id, timeout_s=900)
    assert job["status"] == "succeeded", job.get("failure_reason")
    assert (job["num_nodes"], job["num_devices"]) == (NODES, 1)
    resumed = [
        e["data"]["checkpoint_step"] for e in events(nodes_client, job_id) if e["kind"] == "resumed"
    ]
    assert resumed[0] == paused_at
    assert paused_at < resumed[-1] <= lost_at and resumed[-1] % checkpoint_every == 0, resumed

    # Placed three times (the start, the resume, after the lost node), each time on two
    # different workers, one node each.
    placed = [e for e in events(nodes_client, job_id) if e["kind"] == "placed"]
    assert len(placed) == 3
    for placement in placed:
        workers = placement["data"]["workers"]
        assert len(set(workers)) == NODES
        assert {worker.split(":")[1] for worker in workers} <= pids

    steps = nodes_client.get(f"/v1/jobs/{job_id}/steps").json()["data"]
    assert [s["step"] for s in steps] == list(range(1, train_steps + 1))
    # Every step from the one promised runs on the new config, on both nodes' halves.
    assert {s["config_version"] for s in steps if s["step"] >= applies_from} == {2}
    assert {s["config_version"] for s in steps if s["step"] < applies_from} == {1}
    after = [s for s in steps if s["step"] >= applies_from]
    assert all(s["reward_mean"] == pytest.approx(0.5) for s in after)

    completions = all_pages(nodes_client, f"/v1/jobs/{job_id}/completions")
    per_step: dict[int, list[tuple[int, int]]] = {}
    for row in completions:
        per_step.setdefault(row["step"], []).append((row["prompt_index"], row["group_position"]))
    expected = sorted((p, g) for p in range(PROMPTS_PER_STEP) for g in range(NUM_GENERATIONS))
    assert {step: sorted(pairs) for step, pairs in per_step.items()} == {
        step: expected for step in range(1, train_steps + 1)
    }
    # Each node's rank scored its half in its own sandbox; node 0 recorded both (the steps
    # before the update: the constant function prints nothing).
    for step in range(1, applies_from):
        logs = nodes_client.get(f"/v1/jobs/{job_id}/logs", params={"step": step}).json()
        output = logs["data"][0]["output"]
        assert "[rank 0]" in output and "[rank 1]" in output
    # Each placement ran one rank under each of two workers (the workers' logs say so, from
    # where they stood before this job; the replacement's log is new). Which worker holds
    # rank 0 may differ between placements: the placement takes whichever answers first.
    job_logs = {
        path.name: path.read_bytes()[log_starts.get(path.name, 0) :].decode(errors="replace")
        for path in nodes_stack.log_dir.glob("worker*.log")
    }
    ranks = sorted(
        int(rank) for log in job_logs.values() for rank in re.findall(r"rank (\d) of 2", log)
    )
    assert ranks == [0] * len(placed) + [1] * len(placed), job_logs.keys()
    wait_gone(every_training_process(nodes_stack))


@NEEDS_DEEPSPEED
def test_a_two_node_deepspeed_job_meets_through_accelerate(
    nodes_stack: LocalStack, nodes_client: httpx.Client
) -> None:
    request = job_request(nodes_client, train_steps=2, checkpoint_every=2, num_devices=1)
    request = {**request, "num_nodes": NODES, "engine": "deepspeed_zero2"}
    job_id = str(create_job(nodes_client, request)["id"])
    job = wait_for(nodes_client, job_id, timeout_s=900)
    assert job["status"] == "succeeded", job.get("failure_reason")
    steps = nodes_client.get(f"/v1/jobs/{job_id}/steps").json()["data"]
    assert [s["step"] for s in steps] == [1, 2]
    logs = "".join(
        path.read_text(errors="replace") for path in nodes_stack.log_dir.glob("worker*.log")
    )
    # accelerate launch on each worker, one machine each, the ranks under DeepSpeed.
    assert "rank 0 of 2, engine: deepspeed ZeRO-2" in logs
    assert "rank 1 of 2, engine: deepspeed ZeRO-2" in logs
    wait_gone(every_training_process(nodes_stack))


def test_cancel_stops_the_ranks_of_every_node(
    nodes_stack: LocalStack, nodes_client: httpx.Client
) -> None:
    job_id = running_two_node_job(nodes_client)
    launched = every_training_process(nodes_stack)
    ranks = [rank_pids(worker.pid) for worker in nodes_stack.workers]
    assert sorted(rank for found in ranks for rank in found) == [0, 1]
    assert nodes_client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    job = wait_for(nodes_client, job_id, timeout_s=300)
    assert job["status"] == "cancelled"
    wait_gone(launched)


def test_a_rank_failing_on_another_node_fails_the_job_with_that_nodes_reason(
    nodes_stack: LocalStack, nodes_client: httpx.Client
) -> None:
    job_id = running_two_node_job(nodes_client)
    launched = every_training_process(nodes_stack)
    node_1 = next(worker for worker in nodes_stack.workers if 1 in rank_pids(worker.pid))
    os.kill(rank_pids(node_1.pid)[1], signal.SIGKILL)  # the process, not its machine
    job = wait_for(nodes_client, job_id, timeout_s=300)
    assert job["status"] == "failed"
    assert "node 1:" in job["failure_reason"], job["failure_reason"]
    assert not any(e["kind"] == "node_lost" for e in events(nodes_client, job_id))
    wait_gone(launched)
