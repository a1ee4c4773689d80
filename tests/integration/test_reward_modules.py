"""A tutorial's reward file, unchanged, over HTTP: tried, trained, and a helper changed live.

The file (tests/fixtures/gsm8k_rewards.py) keeps imports, constants and helpers at module
level beside dataset-loading code that must never run in the sandbox (datasets, torch, a
``__main__`` block). Each reward is stored as its own function with only what it uses, so a
change to a helper gives a new version to exactly the functions that call it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.helpers import all_pages, upload_jsonl, wait_for
from tests.tiny import TINY_HYPERPARAMETERS

pytestmark = pytest.mark.integration

TUTORIAL = (Path(__file__).parents[1] / "fixtures" / "gsm8k_rewards.py").read_text()
SYSTEM_PROMPT = TUTORIAL.split('SYSTEM_PROMPT = """')[1].split('"""')[0]
REWARDS = {
    "correctness_reward_func": {"weight": 2.0},
    "int_reward_func": {"weight": 0.5},
    "strict_format_reward_func": {"weight": 0.5},
    "xmlcount_reward_func": {},
}
USES_EXTRACT_XML_ANSWER = {"correctness_reward_func", "int_reward_func"}
GOOD_ANSWER = "<reasoning>\n2 and 2\n</reasoning>\n<answer>\n4\n</answer>\n"


def chat_rows() -> list[dict[str, Any]]:
    return [
        {
            "prompt": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": f"What is {a} + {a}?"},
            ],
            "answer": str(2 * a),
        }
        for a in range(1, 9)
    ]


def test_a_tutorial_reward_module_is_tried_over_http(client: httpx.Client) -> None:
    rows = chat_rows()
    response = client.post(
        "/v1/reward-functions/test",
        json={
            "reward_module": {"source": TUTORIAL, "functions": REWARDS},
            "samples": [
                {"prompt": rows[1]["prompt"], "completion": GOOD_ANSWER, "example": rows[1]},
                {"prompt": rows[1]["prompt"], "completion": "no idea", "example": rows[1]},
            ],
        },
    )
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert results["correctness_reward_func"]["scores"] == [2.0, 0.0]
    assert results["int_reward_func"]["scores"] == [0.5, 0.0]
    assert results["strict_format_reward_func"]["scores"] == [0.5, 0.0]
    assert results["xmlcount_reward_func"]["scores"][0] == pytest.approx(0.5)
    assert "Question:" in results["correctness_reward_func"]["logs"]  # its print, its log
    # weight x score: 2 x 2.0 + 0.5 x 0.5 + 0.5 x 0.5 + 1 x 0.5
    assert response.json()["totals"][0] == pytest.approx(5.0)

    # A name the module does not define is a clear 4xx naming it.
    missing = client.post(
        "/v1/reward-functions/test",
        json={
            "reward_module": {"source": TUTORIAL, "functions": {"accuracy": {}}},
            "samples": [{"prompt": "p", "completion": "c"}],
        },
    )
    assert missing.status_code == 422 and "no top-level function 'accuracy'" in missing.text


def test_a_tutorial_reward_module_trains_and_a_helper_change_versions_its_users(
    client: httpx.Client,
) -> None:
    dataset_id = upload_jsonl(client, chat_rows())
    response = client.post(
        "/v1/jobs",
        json={
            "dataset_id": dataset_id,
            "reward_module": {"source": TUTORIAL, "functions": REWARDS},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 4},
        },
    )
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]

    config = client.get(f"/v1/jobs/{job_id}/config")
    functions = config.json()["reward_functions"]
    assert set(functions) == set(REWARDS)
    for name, function in functions.items():
        # Each function's own code: never the whole file, never its dataset code.
        assert (
            function["source"]
            .rstrip()
            .endswith(TUTORIAL.split(f"def {name}(")[1].rstrip().split("\n\n\ndef ")[0].rstrip())
        )
        assert "load_dataset" not in function["source"] and "torch" not in function["source"]
        assert function["version"] == 1
    assert "import re" in functions["strict_format_reward_func"]["source"]
    assert "def extract_xml_answer" in functions["correctness_reward_func"]["source"]
    assert "import re" not in functions["correctness_reward_func"]["source"]
    assert functions["correctness_reward_func"]["weight"] == 2.0

    # Change a helper while the job is queued or training: only its users get a new version.
    changed_module = TUTORIAL.replace(
        "    return answer.strip()\n", "    return answer.strip().rstrip('.')\n"
    )
    assert changed_module != TUTORIAL
    update = client.put(
        f"/v1/jobs/{job_id}/config",
        headers={"If-Match": config.headers["ETag"]},
        json={
            "reward_functions": {
                name: {"source": changed_module, "function": name, **settings}
                for name, settings in REWARDS.items()
            }
        },
    )
    assert update.status_code == 200, update.text
    assert set(update.json()["changed_functions"]) == USES_EXTRACT_XML_ANSWER
    versions = {n: f["version"] for n, f in update.json()["config"]["reward_functions"].items()}
    assert versions == {n: 2 if n in USES_EXTRACT_XML_ANSWER else 1 for n in REWARDS}

    job = wait_for(client, job_id)
    assert job["status"] == "succeeded", job["failure_reason"]
    steps = client.get(f"/v1/jobs/{job_id}/steps").json()["data"]
    assert len(steps) == 4
    last = steps[-1]["reward_functions"]
    assert {name: metrics["version"] for name, metrics in last.items()} == versions
    assert all(
        metrics["errors"] == 0 for step in steps for metrics in step["reward_functions"].values()
    )
    completions = all_pages(client, f"/v1/jobs/{job_id}/completions")
    assert len(completions) == 4 * TINY_HYPERPARAMETERS["prompts_per_step"] * 8
    assert all(set(c["scores"]) == set(REWARDS) for c in completions)
    assert all(c["scores"]["int_reward_func"] is not None for c in completions)
    logs = client.get(f"/v1/jobs/{job_id}/logs", params={"function": "correctness_reward_func"})
    assert "Question:" in logs.json()["data"][0]["output"]

    # A dry run takes the module form too: the last step re-scored with the module's rewards.
    dry_run = client.put(
        f"/v1/jobs/{job_id}/config",
        params={"dry_run": "true"},
        json={"reward_module": {"source": TUTORIAL, "functions": REWARDS}},
    )
    assert dry_run.status_code == 200, dry_run.text
    assert dry_run.json()["step"] == 4 and not dry_run.json()["errors"]
    rescored = dry_run.json()["completions"]
    assert len(rescored) == TINY_HYPERPARAMETERS["prompts_per_step"] * 8
    assert all(set(c["new_scores"]) == set(REWARDS) for c in rescored)


def test_reward_module_names_must_not_repeat(client: httpx.Client) -> None:
    dataset_id = upload_jsonl(client, chat_rows())
    response = client.post(
        "/v1/jobs",
        json={
            "dataset_id": dataset_id,
            "reward_functions": {
                "int_reward_func": {"source": "def int_reward_func(p, c, e):\n    return 1.0\n"}
            },
            "reward_module": {"source": TUTORIAL, "functions": {"int_reward_func": {}}},
            "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 1},
        },
    )
    assert response.status_code == 422 and "give it once" in response.text


def test_a_module_that_does_not_parse_is_a_400_naming_the_line(client: httpx.Client) -> None:
    response = client.post(
        "/v1/reward-functions/test",
        json={
            "reward_functions": {
                "f": {"source": "import re\n\ndef f(p, c, e)\n    return 1\n", "function": "f"}
            },
            "samples": [{"prompt": "p", "completion": "c"}],
        },
    )
    assert response.status_code == 400 and "line 3" in response.text
