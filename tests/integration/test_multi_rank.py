"""One job on two processes (torchrun, DDP over gloo on CPU), through the API.

The stack's worker can give a job 2 devices (RFT_WORKER_DEVICES=2; processes on CPU); the
jobs here ask for 2 (num_devices) and run on 2 ranks, unless they ask for 1 (the warm spare).
Each rank scores its own half of a step in its own sandbox; rank 0 gathers both halves, and
the worker records them. Cancel, a killed rank and a lost worker must leave no training
process behind. Requests no worker can hold are refused.
"""

from __future__ import annotations

import os
import signal
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.stack import LocalStack
from tests.conftest import new_tenant_key, stack_of_its_own, tenant_client
from tests.integration.helpers import (
    all_pages,
    assert_lookup_results_match_the_table,
    create_job,
    lookup_job,
    upload_jsonl,
    wait_for,
    wait_until,
)
from tests.integration.multi_rank_jobs import (
    NEEDS_DEEPSPEED,
    NUM_GENERATIONS,
    PROMPTS_PER_STEP,
    RANKS,
    assert_devices_fixed,
    assert_every_completion_once,
    job_request,
    optimizer_steps,
    start_job,
    wait_for_ranks,
    wait_for_worker_capacity,
    worker_logs,
)
from tests.processes import (
    descendants,
    is_spare_template,
    parent_of,
    rank_pids,
    started_at,
    training_processes,
    wait_gone,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ranks_stack(shared_model_cache: Path) -> Iterator[LocalStack]:
    with stack_of_its_own(
        "rft-multi-rank-",
        env={
            "RFT_WORKER_DEVICES": str(RANKS),
            "RFT_WORKER_LEASE_S": "6",
            # A killed worker's advert expires soon (the refusal tests count live workers).
            "RFT_WORKER_CAPACITY_TTL_S": "6",
            "OMP_NUM_THREADS": "1",
        },
        model_cache=shared_model_cache,
    ) as stack:
        yield stack


@pytest.fixture
def ranks_client(ranks_stack: LocalStack, ranks_key: str) -> Iterator[httpx.Client]:
    with tenant_client(ranks_stack, key=ranks_key) as http:
        yield http


@pytest.fixture(scope="module")
def ranks_key(ranks_stack: LocalStack) -> str:
    """One tenant for the module: its tests read the module's shared DDP run."""
    return new_tenant_key(ranks_stack)


def test_two_rank_job_records_every_completion_of_both_ranks_once(
    ranks_stack: LocalStack, ranks_client: httpx.Client, ddp_run: DdpRun
) -> None:
    """The DDP job the DeepSpeed engines are compared with (below), read as a user would."""
    train_steps = 3
    job_id = ddp_run.job_id
    job = ranks_client.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "succeeded", job.get("failure_reason")
    assert (job["num_devices"], job["engine"]) == (RANKS, "ddp")

    steps = ranks_client.get(f"/v1/jobs/{job_id}/steps").json()["data"]
    assert [s["step"] for s in steps] == list(range(1, train_steps + 1))
    assert all(s["loss"] is not None and s["reward_mean"] is not None for s in steps)
    completions = all_pages(ranks_client, f"/v1/jobs/{job_id}/completions")
    per_step: dict[int, list[tuple[int, int]]] = {}
    for row in completions:
        per_step.setdefault(row["step"], []).append((row["prompt_index"], row["group_position"]))
    # The global batch, not twice it: every (prompt, position) of each step exactly once.
    expected = sorted((p, g) for p in range(PROMPTS_PER_STEP) for g in range(NUM_GENERATIONS))
    assert {step: sorted(pairs) for step, pairs in per_step.items()} == {
        step: expected for step in range(1, train_steps + 1)
    }
    # Each rank scored its own half and printed so; both halves' logs are in the step's log.
    for step in range(1, train_steps + 1):
        logs = ranks_client.get(f"/v1/jobs/{job_id}/logs", params={"step": step}).json()["data"]
        assert len(logs) == 1
        output = logs[0]["output"]
        assert "[rank 0]" in output and "[rank 1]" in output
        half = PROMPTS_PER_STEP * NUM_GENERATIONS // RANKS
        assert output.count(f"scored {half}") == RANKS
    events = all_pages(ranks_client, f"/v1/jobs/{job_id}/events/history")
    assert [e["step"] for e in events if e["kind"] == "checkpoint"] == [2, 3]
    # Both ranks trained (their log lines are in the worker's log), and nothing is left.
    log = (ranks_stack.log_dir / "worker1.log").read_text(errors="replace")
    assert "/rank1]" in log
    wait_gone(list(training_processes(ranks_stack.workers[0].pid)))


def test_a_two_rank_sft_job_takes_one_batch_over_both_ranks(
    ranks_stack: LocalStack, ranks_client: httpx.Client
) -> None:
    """Supervised (method 'sft'): the step's batch_size examples split over the ranks (each
    trains on half), so both ranks together train on what one process would."""
    rows = [
        {"prompt": f"Say {letter}:", "completion": f" {letter * (i + 2)}"}
        for i, letter in enumerate("abcdefgh")
    ]
    dataset_id = upload_jsonl(ranks_client, rows)

    def sft_job(num_devices: int) -> list[dict[str, Any]]:
        request = {
            "method": "sft",
            "dataset_id": dataset_id,
            "num_devices": num_devices,
            "hyperparameters": {"preset": "tiny-cpu", "train_steps": 3, "batch_size": 8},
        }
        job = wait_for(ranks_client, create_job(ranks_client, request)["id"], timeout_s=900)
        assert job["status"] == "succeeded", job.get("failure_reason")
        steps = ranks_client.get(f"/v1/jobs/{job['id']}/steps").json()["data"]
        assert [s["step"] for s in steps] == [1, 2, 3]
        return list(steps)

    two, one = sft_job(RANKS), sft_job(1)
    # Every example once per step (8 rows, batch 8): the tokens trained on are the same.
    assert [s["metrics"]["num_tokens"] for s in two] == [s["metrics"]["num_tokens"] for s in one]
    assert [s["loss"] for s in two] == pytest.approx([s["loss"] for s in one], rel=1e-3)
    # Both ranks trained (each logs the run's start).
    assert "/rank1] SFT on rft-tiny" in worker_logs(ranks_stack)


AGENT_PROMPTS_PER_STEP = 4
AGENT_NUM_GENERATIONS = 8


def test_a_two_rank_agent_job_records_every_rollout_of_both_ranks_once(
    ranks_client: httpx.Client,
) -> None:
    """Each rank runs its half of a step's rollouts through its own agent sandbox; rank 0
    gathers both halves' trajectories with their completions, so the record holds every
    rollout once, turn by turn, and the step's agent metrics cover the whole step."""
    train_steps = 6
    request = lookup_job(
        ranks_client,
        num_devices=RANKS,
        hyperparameters={
            # 32 rollouts a step: 16 on each rank, whole prompt groups on each.
            "prompts_per_step": AGENT_PROMPTS_PER_STEP,
            "num_generations": AGENT_NUM_GENERATIONS,
            "train_steps": train_steps,
            "checkpoint_every": train_steps,
        },
    )
    job = wait_for(ranks_client, str(create_job(ranks_client, request)["id"]), timeout_s=900)
    assert job["status"] == "succeeded", job.get("failure_reason")
    assert (job["num_devices"], job["engine"]) == (RANKS, "ddp")

    steps = ranks_client.get(f"/v1/jobs/{job['id']}/steps").json()["data"]
    assert [s["step"] for s in steps] == list(range(1, train_steps + 1))
    rollouts_per_step = AGENT_PROMPTS_PER_STEP * AGENT_NUM_GENERATIONS
    for step in steps:
        metrics = step["agent_metrics"]
        assert metrics is not None, step
        assert set(metrics) >= {"tool_calls_per_rollout", "turns_per_rollout", "tools"}
        # Over both ranks' rollouts: at least one turn each (one rank's half would too, so the
        # completion count below is what shows both halves are in).
        assert metrics["turns_per_rollout"] >= 1, metrics

    completions = all_pages(ranks_client, f"/v1/jobs/{job['id']}/completions")
    per_step: dict[int, list[tuple[int, int]]] = {}
    for row in completions:
        per_step.setdefault(row["step"], []).append((row["prompt_index"], row["group_position"]))
    expected = sorted(
        (p, g) for p in range(AGENT_PROMPTS_PER_STEP) for g in range(AGENT_NUM_GENERATIONS)
    )
    assert {step: sorted(pairs) for step, pairs in per_step.items()} == {
        step: expected for step in range(1, train_steps + 1)
    }
    assert len(completions) == train_steps * rollouts_per_step
    tool_results = 0
    for completion in completions:
        trajectory = completion["trajectory"]
        assert trajectory and trajectory[0]["role"] == "assistant", completion
        finals = [m for m in trajectory if m["role"] == "assistant"]
        assert completion["completion"] == finals[-1]["content"], completion
        assert_lookup_results_match_the_table(trajectory)
        tool_results += sum(1 for m in trajectory if m["role"] == "tool" and m["error"] is None)
    # The warmed-up model calls the tool in some rollouts from the first step on.
    assert tool_results > 0


def test_cancel_stops_every_rank(ranks_stack: LocalStack, ranks_client: httpx.Client) -> None:
    worker = ranks_stack.workers[0].pid
    job_id = start_job(ranks_client, train_steps=200, checkpoint_every=100)
    wait_until(ranks_client, job_id, lambda job: job["steps_completed"] >= 1, timeout_s=600)
    launched = list(training_processes(worker))
    assert len(rank_pids(worker)) == RANKS
    assert ranks_client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    job = wait_for(ranks_client, job_id, timeout_s=300)
    assert job["status"] == "cancelled"
    wait_gone(launched)


def test_a_killed_rank_fails_the_job_and_stops_the_others(
    ranks_stack: LocalStack, ranks_client: httpx.Client
) -> None:
    worker = ranks_stack.workers[0].pid
    job_id = start_job(ranks_client, train_steps=200, checkpoint_every=100)
    wait_until(ranks_client, job_id, lambda job: job["steps_completed"] >= 1, timeout_s=600)
    launched = list(training_processes(worker))
    ranks = wait_for_ranks(worker)
    os.kill(ranks[1], signal.SIGKILL)
    job = wait_for(ranks_client, job_id, timeout_s=300)
    assert job["status"] == "failed"
    assert "training process" in job["failure_reason"]
    wait_gone(launched)


def test_a_one_device_job_takes_the_warm_spare_not_torchrun(
    ranks_stack: LocalStack, ranks_client: httpx.Client
) -> None:
    worker = ranks_stack.workers[0].pid
    wait_for_worker_capacity(ranks_stack)  # ready: its spare (or template) starts after the advert
    # Waiting for the job: a spare (a new Python), or the template spares are forked from
    # (RFT_SPARE_FORK), which forks the job's spare when the job comes.
    deadline = time.monotonic() + 60
    while not (
        (waiting := list(training_processes(worker, spares=True)))
        or (templates := [pid for pid in descendants(worker) if is_spare_template(pid)])
    ):
        assert time.monotonic() < deadline, "the worker started no spare"
        time.sleep(0.2)
    assert len(waiting) <= 1
    job_id = start_job(ranks_client, train_steps=200, checkpoint_every=100, num_devices=1)
    wait_until(ranks_client, job_id, lambda job: job["steps_completed"] >= 1, timeout_s=600)
    launched = training_processes(worker, spares=True)
    assert ranks_client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    # The job trains in a spare (plus the next spare), no torchrun, no ranks: the one that was
    # waiting, or the first the template forked.
    if waiting:
        trained_in = waiting[0]
    else:
        forked = [pid for pid in launched if parent_of(pid) == templates[0]]
        assert forked, launched
        trained_in = min(forked, key=started_at)
    assert trained_in in launched
    assert not any("torch.distributed.run" in command for command in launched.values())
    assert rank_pids(worker) == {}
    job = wait_for(ranks_client, job_id, timeout_s=300)
    assert (job["status"], job["num_devices"]) == ("cancelled", 1)
    wait_gone([trained_in])


@pytest.mark.parametrize(
    ("change", "status", "named"),
    [
        ({"num_devices": RANKS + 1}, 400, f"the largest a running worker offers is {RANKS}"),
        ({"num_nodes": 2}, 400, "num_nodes=2: the job needs 2 workers with 2 devices each"),
        # CPU-only workers here; on CPU FSDP would silently train as plain DDP.
        ({"engine": "fsdp"}, 400, "needs CUDA GPUs"),
        ({"engine": "horovod"}, 422, "engine"),
        ({"num_devices": 0}, 422, "num_devices"),
        ({"num_nodes": 0}, 422, "num_nodes"),
    ],
)
def test_device_requests_no_worker_can_hold_are_refused(
    ranks_stack: LocalStack,
    ranks_client: httpx.Client,
    change: dict[str, Any],
    status: int,
    named: str,
) -> None:
    wait_for_worker_capacity(ranks_stack)
    request = {**job_request(ranks_client, train_steps=2), **change}
    response = ranks_client.post("/v1/jobs", json=request)
    if response.is_success:
        # Accepted after all: it must not hold the stack's one worker for the later tests.
        ranks_client.post(f"/v1/jobs/{response.json()['id']}/cancel")
    assert response.status_code == status, response.text
    assert named in response.text


@dataclass(frozen=True)
class DdpRun:
    job_id: str
    trajectory: list[tuple[float, float]]  # each step's (loss, mean reward)


def train_for_trajectory(stack: LocalStack, client: httpx.Client, engine: str) -> DdpRun:
    """Three steps of the same seeded job on ``engine`` (checkpoints at steps 2 and 3)."""
    request = job_request(client, train_steps=3, checkpoint_every=2)
    request["engine"] = engine
    request["hyperparameters"]["seed"] = 7
    seen_before = worker_logs(stack).count("engine: deepspeed ZeRO-")
    job = wait_for(client, str(create_job(client, request)["id"]), timeout_s=1200)
    assert job["status"] == "succeeded", job.get("failure_reason")
    assert job["engine"] == engine
    # Each rank logs what its launcher set up (the variables the Trainer reads).
    deepspeed_ranks = worker_logs(stack).count("engine: deepspeed ZeRO-") - seen_before
    assert deepspeed_ranks == (RANKS if engine != "ddp" else 0)
    steps = client.get(f"/v1/jobs/{job['id']}/steps").json()["data"]
    assert [s["step"] for s in steps] == [1, 2, 3]
    return DdpRun(job["id"], [(s["loss"], s["reward_mean"]) for s in steps])


@pytest.fixture(scope="module")
def ddp_run(ranks_stack: LocalStack, ranks_key: str) -> DdpRun:
    """A 3-step DDP job, trained once for the module: the two-rank record is read from it,
    and each DeepSpeed engine's trajectory compared with it."""
    with tenant_client(ranks_stack, key=ranks_key) as client:
        return train_for_trajectory(ranks_stack, client, "ddp")


@NEEDS_DEEPSPEED
@pytest.mark.parametrize("engine", ["deepspeed_zero2", "deepspeed_zero3"])
def test_a_deepspeed_job_matches_ddp_step_for_step(
    ranks_stack: LocalStack,
    ranks_client: httpx.Client,
    ddp_run: DdpRun,
    engine: str,
) -> None:
    """Same seed, same global batch: ZeRO-2 shards optimizer state and gradients (ZeRO-3 the
    parameters too), and must train the same trajectory as DDP (measured equal to 4 decimals
    on CPU: docs/measured-facts.md). The first DeepSpeed job on a machine JIT-builds its CPU op
    (minutes; cached outside the checkout, keyed by the pins)."""
    sharded = train_for_trajectory(ranks_stack, ranks_client, engine).trajectory
    for ddp, step in zip(ddp_run.trajectory, sharded, strict=True):
        assert step == pytest.approx(ddp, abs=1e-4)


@NEEDS_DEEPSPEED
def test_a_zero3_child_starts_from_a_one_rank_parent(
    ranks_stack: LocalStack, ranks_client: httpx.Client
) -> None:
    """init_from across world sizes and engines: both ZeRO-3 ranks put the job's copy of the
    parent's checkpoint on their model, in the base model's dtype, before DeepSpeed shards it;
    with a KL term, whose reference is that adapter, zero at the first step. (DDP ranks load
    it as one process does: tests/training/test_starting_weights.py.)"""
    parent_request = job_request(ranks_client, train_steps=2, checkpoint_every=1, num_devices=1)
    parent = wait_for(ranks_client, str(create_job(ranks_client, parent_request)["id"]))
    assert parent["status"] == "succeeded", parent.get("failure_reason")
    request = job_request(ranks_client, train_steps=2)
    request.update(engine="deepspeed_zero3", init_from=f"{parent['id']}:checkpoint-1")
    request["hyperparameters"]["beta"] = 0.04
    job = wait_for(ranks_client, str(create_job(ranks_client, request)["id"]), timeout_s=900)
    assert job["status"] == "succeeded", job.get("failure_reason")
    assert job["parent_job_id"] == parent["id"]
    assert_every_completion_once(ranks_client, job["id"], 2)
    steps = ranks_client.get(f"/v1/jobs/{job['id']}/steps").json()["data"]
    assert steps[0]["kl"] == 0.0 and steps[1]["kl"] > 0, steps


# Scores a validation sample by its row's value: the set's mean is known exactly, and a row
# scored twice (each rank evaluating everything) or not at all (one rank's share) moves it.
ROW_VALUE = "def row_value(prompt, completion, example):\n    return float(example['value'])\n"


@pytest.mark.parametrize(
    ("engine", "values"),
    [
        # Three rows over two ranks: shares of one and two rows, merged.
        ("ddp", (1.0, 2.0, 6.0)),
        # One row: rank 0 has none, yet must help gather ZeRO-3's weights; rank 1 then
        # generates alone (transformers would keep it in step with rank 0, which never comes).
        pytest.param("deepspeed_zero3", (5.0,), marks=NEEDS_DEEPSPEED),
    ],
)
def test_a_two_rank_job_evaluates_the_whole_validation_set_once(
    ranks_stack: LocalStack, ranks_client: httpx.Client, engine: str, values: tuple[float, ...]
) -> None:
    """Each rank generates for its share of the validation prompts and scores it in its own
    sandbox; the stored evaluation covers every row once, as on one device (tests/integration/
    test_validation.py). Under ZeRO-3 a rank holds a shard of the weights: generating needs
    every rank to gather them together (a rank evaluating alone would wait forever)."""
    train_steps = 3
    request = job_request(ranks_client, train_steps=train_steps, checkpoint_every=100)
    request["dataset_id"] = upload_jsonl(
        ranks_client, [{"prompt": f"Say {w}:", "value": 0} for w in "abcdefgh"]
    )
    request["validation_dataset_id"] = upload_jsonl(
        ranks_client,
        [
            {"prompt": f"Spell {word}:", "value": value}
            for word, value in zip(("cat", "dog", "emu"), values, strict=False)
        ],
    )
    request["engine"] = engine
    request["reward_functions"]["row_value"] = {"source": ROW_VALUE}
    request["hyperparameters"]["eval_every"] = 2
    evaluated = f"over {len(values)} samples on {RANKS} rank(s)"
    evaluated_before = worker_logs(ranks_stack).count(evaluated)
    job = wait_for(ranks_client, str(create_job(ranks_client, request)["id"]), timeout_s=1200)
    assert job["status"] == "succeeded", job.get("failure_reason")
    assert (job["num_devices"], job["engine"]) == (RANKS, engine)

    evals = ranks_client.get(f"/v1/jobs/{job['id']}/evals").json()["data"]
    assert [e["step"] for e in evals] == [2, train_steps]
    rows = len(values)
    for evaluation in evals:
        # Greedy: one completion per prompt; every row once, not once per rank nor a share.
        assert (evaluation["prompts"], evaluation["samples"]) == (rows, rows)
        functions = evaluation["reward_functions"]
        assert sorted(functions) == ["counting", "row_value"]
        for metrics in functions.values():
            assert (metrics["scored"], metrics["errors"]) == (rows, 0)
        assert functions["row_value"]["mean"] == pytest.approx(statistics.fmean(values))
        assert evaluation["reward_mean"] == pytest.approx(
            functions["row_value"]["mean"] + functions["counting"]["mean"]
        )
    # Both evaluations ran on the job's two ranks (rank 0 logs each).
    assert worker_logs(ranks_stack).count(evaluated) - evaluated_before == len(evals)
    assert_every_completion_once(ranks_client, job["id"], train_steps)


@NEEDS_DEEPSPEED
def test_a_lost_workers_ranks_die_and_the_job_resumes_with_its_optimizer_shards(
    ranks_stack: LocalStack, ranks_client: httpx.Client
) -> None:
    """The worker is killed: its launcher and ranks, in a session of their own that the
    worker's SIGKILL does not reach, die by their death signal; the job resumes from its last
    checkpoint. Under ZeRO-3 the optimizer state is sharded: each rank saved its own shard, and
    each must load it back. Adam counts its steps, so the last checkpoint's shards show whether
    the resumed run went on from the checkpoint's optimizer state (the job's step count) or
    began a fresh one. (ZeRO-2 saves and loads its shards through the same accelerate path;
    a DDP job's lost node resumes in tests/integration/test_multi_node.py.)"""
    engine = "deepspeed_zero3"
    worker = ranks_stack.workers[0]
    train_steps = 6
    request = job_request(ranks_client, train_steps=train_steps, checkpoint_every=2)
    request["engine"] = engine
    deepspeed_ranks_before = worker_logs(ranks_stack).count("engine: deepspeed ZeRO-")
    job_id = str(create_job(ranks_client, request)["id"])
    wait_until(ranks_client, job_id, lambda job: job["steps_completed"] >= 3, timeout_s=1200)
    launched = list(training_processes(worker.pid))
    assert len(rank_pids(worker.pid)) == RANKS
    ranks_stack.kill_worker(worker)
    wait_gone(launched)
    # While it waits for a worker, nothing may resize it: a resume has the same ranks.
    assert_devices_fixed(ranks_client, job_id, engine)
    ranks_stack.start_worker()
    job = wait_for(ranks_client, job_id, timeout_s=1200)
    assert job["status"] == "succeeded", job.get("failure_reason")
    assert (job["num_devices"], job["engine"]) == (RANKS, engine)

    events = all_pages(ranks_client, f"/v1/jobs/{job_id}/events/history")
    resumed = [e["data"]["checkpoint_step"] for e in events if e["kind"] == "resumed"]
    assert len(resumed) == 1 and resumed[0] in (2, 4), resumed
    assert_every_completion_once(ranks_client, job_id, train_steps)
    # Both runs on two DeepSpeed ranks; the second started from the checkpoint.
    log = worker_logs(ranks_stack)
    assert log.count("engine: deepspeed ZeRO-") - deepspeed_ranks_before == 2 * RANKS
    assert f"checkpoint-{resumed[0]}\n" in "".join(
        line + "\n" for line in log.splitlines() if "resume from" in line
    )
    checkpoints = ranks_stack.state_dir / "artifacts" / job_id
    # One shard per rank, each with the optimizer's count at its checkpoint...
    start = optimizer_steps(checkpoints / f"checkpoint-{resumed[0]}")
    assert len(start) == RANKS and all(steps == {resumed[0]} for steps in start.values()), start
    # ...and at the end the whole job's: resumed[0] loaded + the re-run ones (a fresh
    # optimizer would count only train_steps - resumed[0]).
    end = optimizer_steps(checkpoints / f"checkpoint-{train_steps}")
    assert len(end) == RANKS and all(steps == {train_steps} for steps in end.values()), end


def test_no_endpoint_takes_a_world_size_for_an_existing_job(
    ranks_stack: LocalStack, ranks_client: httpx.Client
) -> None:
    """num_devices, num_nodes and engine are set when a job is created and never after: the
    only request bodies that name them are the creation's (and its estimate's)."""
    document = ranks_client.get("/openapi.json").json()
    schemas = document["components"]["schemas"]

    def fields(schema: dict[str, Any], seen: frozenset[str] = frozenset()) -> set[str]:
        if "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[-1]
            return set() if name in seen else fields(schemas[name], seen | {name})
        names = set(schema.get("properties", {}))
        for key in ("allOf", "anyOf", "oneOf"):
            for part in schema.get(key, []):
                names |= fields(part, seen)
        for part in schema.get("properties", {}).values():
            names |= fields(part, seen)
        return names

    sizing = {"num_devices", "num_nodes", "engine"}
    taking = set()
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody", {}).get("content", {})
            for media in body.values():
                if fields(media.get("schema", {})) & sizing:
                    taking.add((method.upper(), path))
    # Creation, and its dry run for the expected cost (which creates nothing).
    assert taking == {("POST", "/v1/jobs"), ("POST", "/v1/jobs/estimate")}
