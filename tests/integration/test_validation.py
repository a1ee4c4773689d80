"""A real job with a validation set: the eval curve through the API, the SDK, the event stream
and the checkpoints (the best by validation reward marked, and downloadable)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

import rft
from rft.cli.app import app
from service.stack import LocalStack
from tests.integration.helpers import all_pages, create_job, upload_jsonl, wait_for
from tests.tiny import TINY_HYPERPARAMETERS
from tests.ui.event_stream import messages_until

pytestmark = pytest.mark.integration

# Scores each sample by its row's "value": the validation rows' mean is known exactly.
ROW_VALUE = "def row_value(prompt, completion, example):\n    return float(example['value'])\n"
LENGTH = "def length(prompt, completion, example):\n    return len(completion) / 64\n"
TRAIN_STEPS = 5
EVAL_EVERY = 2


def validation_job(client: httpx.Client) -> dict[str, object]:
    training = upload_jsonl(client, [{"prompt": f"Say {w}:", "value": 0} for w in "abcd"])
    validation = upload_jsonl(
        client,
        [
            # Chat prompts, while training's are plain: each is templated as training would.
            {"prompt": [{"role": "user", "content": "Count:"}], "value": 1},
            {"prompt": [{"role": "user", "content": "Name a colour:"}], "value": 2},
            {"prompt": [{"role": "user", "content": "Spell cat:"}], "value": 6},
        ],
    )
    return create_job(
        client,
        {
            "dataset_id": training,
            "validation_dataset_id": validation,
            "reward_functions": {
                "row_value": {"source": ROW_VALUE, "weight": 1.0},
                "length": {"source": LENGTH, "weight": 1.0},
            },
            "hyperparameters": {
                **TINY_HYPERPARAMETERS,
                "train_steps": TRAIN_STEPS,
                "num_generations": 4,
                "eval_every": EVAL_EVERY,
                "keep_best": 1,
                "checkpoint_every": 100,
            },
        },
    )


def test_a_job_with_a_validation_set_shows_its_eval_curve(
    stack: LocalStack, client: httpx.Client, api_key: str, tmp_path: Path
) -> None:
    job = wait_for(client, str(validation_job(client)["id"]))
    assert job["status"] == "succeeded", job["failure_reason"]
    job_id = job["id"]

    # Every eval_every steps, and after the last one.
    page = client.get(f"/v1/jobs/{job_id}/evals", params={"limit": 1}).json()
    assert page["has_more"] and page["next_cursor"] == "2"
    evals = client.get(f"/v1/jobs/{job_id}/evals").json()["data"]
    assert [e["step"] for e in evals] == [2, 4, 5]
    for evaluation in evals:
        # Greedy by default: one completion per prompt, each scored with its own row.
        assert (evaluation["prompts"], evaluation["samples"]) == (3, 3)
        functions = evaluation["reward_functions"]
        assert functions["row_value"]["mean"] == pytest.approx(3.0)
        assert functions["row_value"]["scored"] == 3 and functions["row_value"]["errors"] == 0
        assert functions["length"]["scored"] == 3
        assert evaluation["reward_mean"] == pytest.approx(3.0 + functions["length"]["mean"])
    assert (
        client.get(f"/v1/jobs/{job_id}/evals", params={"after_step": 4}).json()["data"][0]["step"]
        == 5
    )

    # The SDK reads the same curve, typed.
    with rft.Client(api_key=api_key, base_url=stack.base_url, timeout=120) as sdk:
        typed = sdk.jobs.evals(job_id)
        assert [e.step for e in typed] == [2, 4, 5]
        assert isinstance(typed[0], rft.Evaluation)
        assert typed[-1].reward_mean == pytest.approx(evals[-1]["reward_mean"])
        assert typed[-1].reward_functions["row_value"].mean == pytest.approx(3.0)
        checkpoints = sdk.jobs.checkpoints(job_id)

        # Every evaluated step was checkpointed; the best by validation reward is marked.
        by_step = {c.step: c for c in checkpoints.data}
        assert sorted(by_step) == [2, 4, 5]
        rewards = {e["step"]: e["reward_mean"] for e in evals}
        assert {step: c.eval_reward for step, c in by_step.items()} == pytest.approx(rewards)
        best = max(sorted(rewards), key=lambda step: rewards[step])
        assert [c.step for c in checkpoints.data if c.is_best] == [best]
        adapter = sdk.jobs.download_checkpoint(job_id, best, tmp_path)
        assert (adapter / "adapter_config.json").exists()

    # The CLI lists the curve, and marks the best checkpoint.
    cli = CliRunner(env={"RFT_API_KEY": api_key, "RFT_BASE_URL": stack.base_url, "COLUMNS": "200"})
    listed = cli.invoke(app, ["jobs", "evals", job_id])
    assert listed.exit_code == 0, listed.output
    # Data rows (rich draws the header with heavy lines).
    rows = [line.split("│")[1:-1] for line in listed.output.splitlines() if "│" in line]
    assert [row[0].strip() for row in rows] == ["2", "4", "5"]
    assert rows[0][1].strip() == f"{evals[0]['reward_mean']:.4f}"
    saved = cli.invoke(app, ["checkpoints", "list", job_id])
    assert saved.exit_code == 0, saved.output
    best_row = next(line for line in saved.output.splitlines() if line.endswith("best │"))
    assert best_row.split("│")[1].strip() == str(best)

    # Each evaluation is an 'eval' event, in the history and in the live stream.
    events = [
        e for e in all_pages(client, f"/v1/jobs/{job_id}/events/history") if e["kind"] == "eval"
    ]
    assert [e["step"] for e in events] == [2, 4, 5]
    assert events[0]["data"]["reward_mean"] == pytest.approx(evals[0]["reward_mean"])
    with client.stream(
        "GET", f"/v1/jobs/{job_id}/events", timeout=httpx.Timeout(60, read=30)
    ) as response:
        messages = messages_until(response, lambda m: m.event == "end")
    streamed = [m.json for m in messages if m.event == "eval"]
    assert [e["step"] for e in streamed] == [2, 4, 5]
    assert streamed[-1]["data"]["reward_functions"]["row_value"]["mean"] == pytest.approx(3.0)


def test_a_held_out_share_of_the_training_rows_validates(client: httpx.Client) -> None:
    rows = [{"prompt": f"Say {i}:", "value": i} for i in range(8)]
    job = create_job(
        client,
        {
            "dataset_id": upload_jsonl(client, rows),
            "validation_split": 0.25,
            "reward_functions": {"row_value": {"source": ROW_VALUE}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 2, "num_generations": 4},
        },
    )
    assert job["validation_split"] == 0.25
    job = wait_for(client, str(job["id"]))
    assert job["status"] == "succeeded", job["failure_reason"]
    # eval_every unset: once, after the last step; 2 of the 8 rows held out.
    evals = client.get(f"/v1/jobs/{job['id']}/evals").json()["data"]
    assert [(e["step"], e["prompts"]) for e in evals] == [(2, 2)]
    # The last 2 of the 8 rows (values 6 and 7) are held out, and not trained on.
    assert evals[0]["reward_functions"]["row_value"]["mean"] == pytest.approx(6.5)
    completions = all_pages(client, f"/v1/jobs/{job['id']}/completions")
    assert completions and max(c["dataset_index"] for c in completions) < 6
