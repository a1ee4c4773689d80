"""A tutorial's reward file through the SDK and the CLI, unchanged: its functions passed as
plain Python functions (module-level helpers, constants and `import re` included), or the
file named as a RewardModule, trained on the real stack."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import rft
from rft.cli.app import app
from tests.fixtures import gsm8k_rewards as tutorial
from tests.tiny import TINY_HYPERPARAMETERS

TUTORIAL_PATH = Path(tutorial.__file__)
GOOD_ANSWER = "<reasoning>\n2 and 2\n</reasoning>\n<answer>\n4\n</answer>\n"


def chat_rows() -> list[dict[str, Any]]:
    return [
        {
            "prompt": [
                {"role": "system", "content": tutorial.SYSTEM_PROMPT},
                {"role": "user", "content": f"What is {a} + {a}?"},
            ],
            "answer": str(2 * a),
        }
        for a in range(1, 9)
    ]


def test_tutorial_functions_train_unchanged_through_the_sdk(rft_client: rft.Client) -> None:
    dataset = rft_client.datasets.upload(chat_rows(), name="gsm8k-like")
    job = rft_client.jobs.create(
        dataset=dataset,
        reward_functions={
            # Keys need not match the functions' names.
            "correctness": rft.RewardFunction(tutorial.correctness_reward_func, weight=2.0),
            "strict_format_reward_func": tutorial.strict_format_reward_func,
            "xmlcount": tutorial.xmlcount_reward_func,
        },
        hyperparameters={**TINY_HYPERPARAMETERS, "train_steps": 3},
    )
    finished = rft_client.jobs.wait(job.id, timeout=600, poll_interval=0.5)
    assert finished.status == rft.JobStatus.SUCCEEDED, finished.failure_reason

    config = rft_client.jobs.get_config(job.id)
    correctness = config.reward_functions["correctness"].source
    assert "def extract_xml_answer" in correctness and "def correctness_reward_func" in correctness
    assert "load_dataset" not in correctness and "SYSTEM_PROMPT" not in correctness
    assert config.reward_functions["strict_format_reward_func"].source.startswith("import re\n")
    assert config.reward_functions["correctness"].weight == 2.0

    steps = rft_client.jobs.steps(job.id)
    assert len(steps) == 3
    for step in steps:
        assert set(step.reward_functions) == {
            "correctness",
            "strict_format_reward_func",
            "xmlcount",
        }
        assert all(metrics.errors == 0 for metrics in step.reward_functions.values())
    completions = list(rft_client.jobs.completions(job.id, step=3))
    assert completions and all(c.scores["xmlcount"] is not None for c in completions)


def test_a_reward_file_or_module_is_tried_as_a_reward_module(rft_client: rft.Client) -> None:
    rows = chat_rows()
    samples = [{"prompt": rows[1]["prompt"], "completion": GOOD_ANSWER, "example": rows[1]}]
    for module in (TUTORIAL_PATH, tutorial):
        result = rft_client.reward_functions.test(
            reward_module=rft.RewardModule(
                module, {"correctness_reward_func": 2.0, "int_reward_func": 0.5}
            ),
            samples=samples,
        )
        assert result.results["correctness_reward_func"].scores == [2.0]
        assert result.results["int_reward_func"].scores == [0.5]
        assert result.totals == [pytest.approx(2.0 * 2.0 + 0.5 * 0.5)]


def test_a_function_using_names_its_file_lacks_is_refused_in_the_sdk() -> None:
    namespace: dict[str, Any] = {}
    exec(  # a function whose global exists only at run time, as in a notebook
        "def uses_runtime_global(prompt, completion, example):\n    return THRESHOLD\n",
        namespace,
    )
    with pytest.raises(rft.RewardFunctionSourceError):
        rft.RewardFunction(namespace["uses_runtime_global"])


def test_the_cli_creates_a_job_from_a_tutorial_file(rft_client: rft.Client, tmp_path: Path) -> None:
    (tmp_path / "rewards.py").write_text(TUTORIAL_PATH.read_text())
    dataset = rft_client.datasets.upload(chat_rows(), name="gsm8k-cli")
    (tmp_path / "job.yaml").write_text(
        f"dataset_id: {dataset.id}\n"
        "reward_module:\n"
        "  source_file: rewards.py\n"
        "  functions:\n"
        "    correctness_reward_func: {weight: 2.0}\n"
        "    strict_format_reward_func: {weight: 0.5, max_concurrency: 1}\n"
        "reward_functions:\n"
        "  ints: {source_file: rewards.py, function: int_reward_func}\n"
        f"hyperparameters: {json.dumps({**TINY_HYPERPARAMETERS, 'train_steps': 1})}\n"
    )
    cli = CliRunner(env={"RFT_API_KEY": rft_client.api_key, "RFT_BASE_URL": rft_client.base_url})
    result = cli.invoke(app, ["jobs", "create", "-f", str(tmp_path / "job.yaml")])
    assert result.exit_code == 0, result.output
    job_id = result.output.split("created job ")[1].split()[0]
    finished = rft_client.jobs.wait(job_id, timeout=600, poll_interval=0.5)
    assert finished.status == rft.JobStatus.SUCCEEDED, finished.failure_reason
    config = rft_client.jobs.get_config(job_id)
    assert set(config.reward_functions) == {
        "correctness_reward_func",
        "strict_format_reward_func",
        "ints",
    }
    assert config.reward_functions["strict_format_reward_func"].max_concurrency == 1
    assert "def int_reward_func" in config.reward_functions["ints"].source
