"""Experiment trackers: a job with report_to=['tensorboard'] writes TensorBoard event files."""

from __future__ import annotations

import httpx
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from service.stack import LocalStack
from tests.integration.helpers import create_job, upload_jsonl, wait_for
from tests.tiny import TINY_HYPERPARAMETERS
from workers.training.trackers import tracker_environment, tracker_variables

pytestmark = pytest.mark.integration

VOWELS = (
    "def vowels(prompt, completion, example):\n"
    "    return sum(ch in 'aeiou' for ch in completion) / max(1, len(completion))\n"
)
TRAIN_STEPS = 2


def test_tensorboard_event_files_hold_the_reward(client: httpx.Client, stack: LocalStack) -> None:
    dataset_id = upload_jsonl(client, [{"prompt": f"Say {w}:"} for w in ("yes", "no", "maybe")])
    job = create_job(
        client,
        {
            "dataset_id": dataset_id,
            "reward_functions": {"vowels": {"source": VOWELS}},
            "hyperparameters": {
                **TINY_HYPERPARAMETERS,
                "train_steps": TRAIN_STEPS,
                "num_generations": 4,
                "report_to": ["tensorboard"],
            },
        },
    )
    job = wait_for(client, str(job["id"]))
    assert job["status"] == "succeeded", job["failure_reason"]
    assert job["hyperparameters"]["report_to"] == ["tensorboard"]

    runs = stack.state_dir / "artifacts" / job["id"] / "runs"
    event_files = sorted(runs.rglob("events.out.tfevents.*"))
    assert event_files, f"no TensorBoard event files under {runs}"
    accumulator = EventAccumulator(str(event_files[0].parent))
    accumulator.Reload()
    assert "train/reward" in accumulator.Tags()["scalars"], accumulator.Tags()
    rewards = accumulator.Scalars("train/reward")
    assert [event.step for event in rewards] == list(range(1, TRAIN_STEPS + 1))
    # TRL's reward is the step's mean reward, as the API records it.
    steps = client.get(f"/v1/jobs/{job['id']}/steps").json()["data"]
    for event, step in zip(rewards, steps, strict=True):
        assert event.value == pytest.approx(step["reward_mean"], abs=1e-5)


@pytest.mark.parametrize(
    ("report_to", "problem"),
    [
        (["neptune"], "report_to"),
        (["wandb", "wandb"], "the same tracker is given twice"),
        ("tensorboard", "report_to"),
    ],
)
def test_report_to_is_validated(client: httpx.Client, report_to: object, problem: str) -> None:
    dataset_id = upload_jsonl(client, [{"prompt": "Say yes:"}, {"prompt": "Say no:"}])
    response = client.post(
        "/v1/jobs",
        json={
            "dataset_id": dataset_id,
            "reward_functions": {"vowels": {"source": VOWELS}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "report_to": report_to},
        },
    )
    assert response.status_code == 422, response.text
    assert problem in response.text


def test_tracker_secrets_reach_only_their_tracker_and_only_during_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os

    secrets = {"WANDB_API_KEY": "k", "MLFLOW_TRACKING_URI": "http://m", "OPENAI_API_KEY": "x"}
    assert tracker_variables(["wandb"], secrets) == {"WANDB_API_KEY": "k"}
    monkeypatch.setenv("WANDB_API_KEY", "the worker's own")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with tracker_environment(["wandb", "mlflow"], secrets):
        assert os.environ["WANDB_API_KEY"] == "k"
        assert os.environ["MLFLOW_TRACKING_URI"] == "http://m"
        assert "OPENAI_API_KEY" not in os.environ or os.environ["OPENAI_API_KEY"] != "x"
    assert os.environ["WANDB_API_KEY"] == "the worker's own"
    assert "MLFLOW_TRACKING_URI" not in os.environ
