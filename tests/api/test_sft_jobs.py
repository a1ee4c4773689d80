"""Supervised jobs (method "sft") at the API: what a request may give, which datasets fit, and
what the job reads back. Nothing here trains: the one job created is cancelled at once."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from service.jobs.hyperparameters import SFT_LEARNING_RATE
from tests.integration.helpers import upload_jsonl

CONVERSATIONS = [
    {
        "messages": [
            {"role": "user", "content": f"Say {letter}"},
            {"role": "assistant", "content": letter * 3},
        ]
    }
    for letter in "abcd"
]
REWARD = "def one(prompt, completion, example):\n    return 1.0\n"


def sft_request(dataset_id: str, **overrides: Any) -> dict[str, Any]:
    return {
        "method": "sft",
        "dataset_id": dataset_id,
        "hyperparameters": {"train_steps": 2},
        **overrides,
    }


def refused(client: httpx.Client, body: dict[str, Any], status: int) -> str:
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == status, response.text
    return str(response.text)


@pytest.fixture
def conversations(client: httpx.Client) -> str:
    return upload_jsonl(client, CONVERSATIONS)


def test_a_supervised_job_reads_back_with_its_method_and_sft_settings(
    client: httpx.Client, conversations: str
) -> None:
    created = client.post("/v1/jobs", json=sft_request(conversations))
    assert created.status_code == 201, created.text
    job = created.json()
    client.post(f"/v1/jobs/{job['id']}/cancel")  # nothing here needs it to train
    assert job["method"] == "sft"
    hyperparameters = job["hyperparameters"]
    # Resolved as stored: TRL's SFT batch and length, SFT's LoRA learning rate.
    assert hyperparameters["batch_size"] == 8 and hyperparameters["max_length"] == 1024
    assert hyperparameters["learning_rate"] == SFT_LEARNING_RATE
    assert client.get(f"/v1/jobs/{job['id']}").json()["method"] == "sft"
    # A preset's learning rate wins over SFT's default.
    tiny = client.post(
        "/v1/jobs",
        json=sft_request(conversations, hyperparameters={"preset": "tiny-cpu", "batch_size": 4}),
    )
    assert tiny.status_code == 201, tiny.text
    client.post(f"/v1/jobs/{tiny.json()['id']}/cancel")
    assert tiny.json()["hyperparameters"]["learning_rate"] == 2e-2
    assert tiny.json()["hyperparameters"]["batch_size"] == 4

    # It has no reward config to change.
    config = client.get(f"/v1/jobs/{job['id']}/config")
    update = client.put(
        f"/v1/jobs/{job['id']}/config",
        json={"reward_functions": {"one": {"source": REWARD}}},
        headers={"If-Match": config.headers["ETag"]},
    )
    assert update.status_code == 400, update.text
    assert "method 'sft'" in update.json()["detail"]


@pytest.mark.parametrize(
    ("rows", "problem"),
    [
        # A conversation must end with the answer to learn.
        (
            [{"messages": [{"role": "user", "content": "hi"}]}],
            "row 1: 'messages' ends with a 'user' message",
        ),
        # GRPO's prompts alone teach nothing by example.
        ([{"prompt": "Say a"}], "row 1: nothing to learn from"),
        ([{"prompt": "Say a", "completion": ""}], "non-empty text 'completion'"),
        (
            [
                {"prompt": [{"role": "user", "content": "hi"}], "completion": "a"},
                {"prompt": [{"role": "user", "content": "hi"}], "completion": 3},
            ],
            "row 2: 'completion' must be a non-empty list of chat messages",
        ),
        (
            # An OpenAI chat file's conversation (its messages are the prompt) beside a
            # prompt-completion row.
            [
                {
                    "prompt": [
                        {"role": "user", "content": "hi"},
                        {"role": "assistant", "content": "a"},
                    ]
                },
                {"prompt": [{"role": "user", "content": "hi"}], "completion": "a"},
            ],
            "row 2 is a chat prompt-completion example, and row 1 a conversation one",
        ),
    ],
)
def test_a_dataset_without_examples_is_400_naming_the_row(
    client: httpx.Client, rows: list[dict[str, Any]], problem: str
) -> None:
    detail = refused(client, sft_request(upload_jsonl(client, rows)), 400)
    assert problem in detail, detail
    assert "cannot train method 'sft'" in detail


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"reward_functions": {"one": {"source": REWARD}}}, "leave out reward_functions"),
        ({"runtime_packages": ["rapidfuzz"]}, "leave out runtime_packages"),
        (
            {"hyperparameters": {"num_generations": 4, "temperature": 0.7}},
            "hyperparameters num_generations, temperature steer GRPO",
        ),
        ({"hyperparameters": {"batch_size": 0}}, "batch_size"),
    ],
)
def test_what_only_grpo_uses_is_422_for_a_supervised_job(
    client: httpx.Client, conversations: str, overrides: dict[str, Any], problem: str
) -> None:
    assert problem in refused(client, sft_request(conversations, **overrides), 422)


def test_sft_settings_are_refused_for_grpo_and_grpo_refuses_conversations(
    client: httpx.Client, conversations: str
) -> None:
    prompts = upload_jsonl(client, [{"prompt": f"Say {w}"} for w in "ab"])
    grpo = {
        "dataset_id": prompts,
        "reward_functions": {"one": {"source": REWARD}},
        "hyperparameters": {"batch_size": 4},
    }
    assert "are for method 'sft'" in refused(client, grpo, 422)
    grpo = {**grpo, "dataset_id": conversations, "hyperparameters": {"prompts_per_step": 2}}
    assert "has no prompts" in refused(client, grpo, 400)
    # Without reward functions a GRPO job is refused as before.
    assert "reward function" in refused(client, {"dataset_id": prompts}, 422)


def test_a_batch_that_does_not_split_over_the_devices_is_400(
    client: httpx.Client, conversations: str
) -> None:
    body = sft_request(conversations, num_devices=2, hyperparameters={"batch_size": 3})
    assert "cannot be split evenly" in refused(client, body, 400)


def test_conversation_uploads_are_checked_like_prompts(client: httpx.Client) -> None:
    bad = b'{"messages": [{"role": "robot", "content": "hi"}]}\n'
    response = client.post("/v1/datasets", files={"file": ("c.jsonl", bad)})
    assert response.status_code == 400, response.text
    assert "record 1: message 0 has role 'robot'" in response.json()["detail"]
    missing = b'{"messages": [{"role": "user", "content": "hi"}]}\n{"other": 1}\n'
    response = client.post("/v1/datasets", files={"file": ("c.jsonl", missing)})
    assert response.status_code == 400, response.text
    assert "record 2: 'messages' must be a list" in response.json()["detail"]
    # CSV cells of messages are read as chat messages, as prompt cells are.
    csv = b'messages\n"[{""role"": ""user"", ""content"": ""hi""}]"\n'
    response = client.post("/v1/datasets", files={"file": ("c.csv", csv)})
    assert response.status_code == 201, response.text
    assert response.json()["prompt_kind"] == "chat"
