"""A whole reinforcement fine-tuning job driven by the official openai package, unmodified
(``openai.OpenAI(base_url=<stack>/v1, api_key=<tenant key>)``): files -> a job with a python
grader inside a multi grader -> events with metrics -> succeeded -> checkpoints -> chat with
fine_tuned_model; and graders.run scores as our own /v1/reward-functions/test for the same
samples.

Pause and resume through the openai client run on jobs a stand-in worker holds (no training:
tests/held_jobs.py); that a real worker pauses, and that a config stored while a job is paused
reaches its resumed run, is shown once end to end (tests/integration/test_faults.py)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from service.stack import LocalStack
from tests.held_jobs import held_job, let_go
from tests.integration.helpers import wait_until
from tests.tiny import TINY_HYPERPARAMETERS

ROWS = [
    {"messages": [{"role": "user", "content": f"Say the letter {letter}:"}], "answer": letter}
    for letter in "abcdefgh"
]
PYTHON_GRADER = {
    "type": "python",
    "name": "mentions",
    "source": "def grade(sample, item):\n"
    "    text = sample['output_text'].lower()\n"
    "    return min(1.0, text.count(item['answer']) / 3)\n",
}
GRADER: dict[str, Any] = {
    "type": "multi",
    "name": "letter",
    "calculate_output": "0.8 * mentions + 0.2 * starts",
    "graders": {
        "mentions": PYTHON_GRADER,
        "starts": {
            "type": "string_check",
            "name": "starts",
            "input": "{{sample.output_text}}",
            "reference": "{{item.answer}}",
            "operation": "ilike",
        },
    },
}
# rft-tiny trains with the tiny-cpu preset (TINY_HYPERPARAMETERS); 8 rows, 2 a step, 2 epochs.
HYPERPARAMETERS = {"n_epochs": 2, "batch_size": 2, "eval_interval": 2, "eval_samples": 1}
TRAIN_STEPS = 8


@pytest.fixture(scope="module")
def client(stack: LocalStack, tenant_key: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{stack.base_url}/v1", api_key=tenant_key, max_retries=0, timeout=300
    )


def reinforcement(grader: dict[str, Any], hyperparameters: dict[str, Any] | None = None) -> Any:
    """OpenAI's ``method`` argument, as code written for OpenAI passes it."""
    method: dict[str, Any] = {"grader": grader}
    if hyperparameters is not None:
        method["hyperparameters"] = hyperparameters
    return {"type": "reinforcement", "reinforcement": method}


def jsonl(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def test_a_whole_job_through_the_openai_client(
    stack: LocalStack, client: openai.OpenAI, tenant: httpx.Client
) -> None:
    training = client.files.create(file=("train.jsonl", jsonl(ROWS)), purpose="fine-tune")
    validation = client.files.create(file=("valid.jsonl", jsonl(ROWS[:2])), purpose="fine-tune")
    job = client.fine_tuning.jobs.create(
        model="rft-tiny",
        training_file=training.id,
        validation_file=validation.id,
        suffix="letters",
        seed=7,
        method={  # type: ignore[arg-type]
            "type": "reinforcement",
            "reinforcement": {"grader": GRADER, "hyperparameters": HYPERPARAMETERS},  # type: ignore[typeddict-item]
        },
    )
    assert job.object == "fine_tuning.job"
    assert job.status == "queued"
    assert job.model == "rft-tiny" and job.training_file == training.id
    assert job.validation_file == validation.id
    assert job.seed == 7 and job.fine_tuned_model is None
    assert job.method is not None and job.method.reinforcement is not None
    assert job.method.reinforcement.grader.type == "multi"
    assert job.hyperparameters.batch_size == 2 and job.hyperparameters.n_epochs == 2

    # One system: the native API shows the same job, training with the tiny model's recipe.
    ours = tenant.get(f"/v1/jobs/{job.id}").json()
    assert ours["name"] == "letters" and ours["dataset_id"] == training.id
    assert ours["validation_dataset_id"] == validation.id
    assert ours["hyperparameters"]["train_steps"] == TRAIN_STEPS
    assert ours["hyperparameters"]["eval_every"] == 2
    assert ours["hyperparameters"]["seed"] == 7
    for name, value in TINY_HYPERPARAMETERS.items():
        assert ours["hyperparameters"][name] == value, name
    assert [j.id for j in client.fine_tuning.jobs.list(limit=5)] == [job.id]

    finished = wait_until(
        tenant, job.id, lambda j: j["status"] in {"succeeded", "failed"}, timeout_s=900
    )
    assert finished["status"] == "succeeded", finished["failure_reason"]
    done = client.fine_tuning.jobs.retrieve(job.id)
    assert done.status == "succeeded"
    assert done.fine_tuned_model == f"ft:rft-tiny:{job.id}"
    assert done.finished_at is not None and done.error is None

    events = list(client.fine_tuning.jobs.list_events(job.id, limit=100))
    assert all(event.object == "fine_tuning.job.event" for event in events)
    metrics = [event for event in events if event.type == "metrics"]
    assert [event.data["step"] for event in metrics] == list(range(TRAIN_STEPS, 0, -1))  # type: ignore[index]
    last = metrics[0].data
    assert isinstance(last, dict)
    assert set(last["scores"]) == {"mentions", "starts"}
    assert last["errors"] == {"mentions": 0, "starts": 0}
    assert last["train_reward_mean"] is not None
    assert last["valid_reward_mean"] is not None  # step 8 is evaluated
    statuses = [
        event.data["status"]  # type: ignore[index]
        for event in events
        if event.type == "message" and "status" in event.data  # type: ignore[operator]
    ]
    assert {"queued", "running", "succeeded"} <= set(statuses)
    first_page = client.fine_tuning.jobs.list_events(job.id, limit=3)
    assert len(first_page.data) == 3 and first_page.has_more
    second_page = client.fine_tuning.jobs.list_events(job.id, limit=3, after=first_page.data[-1].id)
    assert second_page.data[0].id == events[3].id

    checkpoints = list(client.fine_tuning.jobs.checkpoints.list(job.id, limit=100))
    assert checkpoints and all(c.object == "fine_tuning.job.checkpoint" for c in checkpoints)
    steps = [c.step_number for c in checkpoints]
    assert steps == sorted(steps, reverse=True) and {2, 4, 6, 8} <= set(steps)
    assert checkpoints[-1].fine_tuned_model_checkpoint == (
        f"ft:rft-tiny:{job.id}:ckpt-step-{steps[-1]}"
    )

    # The fine-tuned model and its checkpoints answer through our chat completions.
    stack.start_inference()
    for model in (done.fine_tuned_model, checkpoints[-1].fine_tuned_model_checkpoint):
        reply = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Say the letter a:"}],
            max_tokens=8,
            temperature=0,
        )
        assert reply.model == model
        assert reply.choices[0].message.role == "assistant"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model=f"ft:some-other-base:{job.id}", messages=[{"role": "user", "content": "hi"}]
        )

    # graders.run scores as our test endpoint does, with the job's own (compiled) functions.
    samples = [("a a a", ROWS[0]), ("A then b", ROWS[0]), ("nothing", ROWS[1])]
    runs = [
        client.fine_tuning.alpha.graders.run(grader=GRADER, model_sample=text, item=item)  # type: ignore[arg-type]
        for text, item in samples
    ]
    assert [run.reward for run in runs] == pytest.approx([1.0, 0.8 / 3 + 0.2, 0.0])
    functions = tenant.get(f"/v1/jobs/{job.id}/config").json()["reward_functions"]
    tested = tenant.post(
        "/v1/reward-functions/test",
        json={
            "reward_functions": {name: {"source": f["source"]} for name, f in functions.items()},
            "samples": [
                {"prompt": item["messages"], "completion": text, "example": item}
                for text, item in samples
            ],
        },
    )
    assert tested.status_code == 200, tested.text
    results = tested.json()["results"]
    assert results["letter"]["scores"] == [run.reward for run in runs]
    assert results["letter__mentions"]["scores"] == [run.sub_rewards["mentions"] for run in runs]
    assert results["letter__starts"]["scores"] == [run.sub_rewards["starts"] for run in runs]


def test_bad_job_requests_are_openai_errors(client: openai.OpenAI) -> None:
    training = client.files.create(file=("t.jsonl", jsonl(ROWS)), purpose="fine-tune")
    with pytest.raises(openai.BadRequestError) as dpo:
        client.fine_tuning.jobs.create(
            model="rft-tiny", training_file=training.id, method={"type": "dpo"}
        )
    assert dpo.value.param == "method"  # type: ignore[attr-defined]
    # A supervised job learns the assistant's answers, which these rows do not hold.
    with pytest.raises(openai.BadRequestError, match="row 1: nothing to learn") as supervised:
        client.fine_tuning.jobs.create(
            model="rft-tiny", training_file=training.id, method={"type": "supervised"}
        )
    assert supervised.value.param == "training_file"  # type: ignore[attr-defined]
    with pytest.raises(openai.NotFoundError, match="No such File object: file-missing"):
        client.fine_tuning.jobs.create(
            model="rft-tiny",
            training_file="file-missing",
            method=reinforcement(GRADER),
        )
    with pytest.raises(openai.BadRequestError, match="prompts_per_step"):
        client.fine_tuning.jobs.create(
            model="rft-tiny",
            training_file=training.id,
            method=reinforcement(GRADER, {"batch_size": 0}),
        )
    broken = {**GRADER, "calculate_output": "mentions + missing"}
    with pytest.raises(openai.BadRequestError, match="'missing'"):
        client.fine_tuning.jobs.create(
            model="rft-tiny",
            training_file=training.id,
            method=reinforcement(broken),
        )
    with pytest.raises(openai.NotFoundError, match="No such fine-tuning job"):
        client.fine_tuning.jobs.retrieve("job_missing")


def test_pause_then_resume_or_cancel_never_leaves_the_job_stuck(
    client: openai.OpenAI, tenant_key: str
) -> None:
    """OpenAI has no "pausing": a job reads "paused" from the pause on. Code written for OpenAI
    that resumes (or cancels) it, at once or once it reads paused, is never refused. On jobs a
    stand-in worker holds (tests/held_jobs.py); a real one pauses in
    tests/integration/test_faults.py."""
    job_id = held_job(tenant_key)
    # Pause, and resume before the worker let go: no 409 (the pause is called off).
    assert client.fine_tuning.jobs.pause(job_id).status == "paused"
    assert client.fine_tuning.jobs.retrieve(job_id).status == "paused"
    assert client.fine_tuning.jobs.resume(job_id).status == "running"

    # Pause, and resume only once the worker has let go: the job is queued again.
    assert client.fine_tuning.jobs.pause(job_id).status == "paused"
    let_go(job_id)
    assert client.fine_tuning.jobs.retrieve(job_id).status == "paused"
    events = client.fine_tuning.jobs.list_events(job_id, limit=100).data
    statuses = [e.data["status"] for e in events if e.data and "status" in e.data]  # type: ignore[index,operator]
    assert statuses[:2] == ["paused", "pausing"]  # newest first: the worker let go
    assert client.fine_tuning.jobs.resume(job_id).status == "queued"
    assert client.fine_tuning.jobs.cancel(job_id).status == "cancelled"

    # Pause, then cancel at once: the job ends cancelled.
    other = held_job(tenant_key)
    assert client.fine_tuning.jobs.pause(other).status == "paused"
    assert client.fine_tuning.jobs.cancel(other).status == "cancelled"
    let_go(other)  # the worker stops after its step: the job stays cancelled
    assert client.fine_tuning.jobs.retrieve(other).status == "cancelled"
