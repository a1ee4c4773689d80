"""Trying reward functions before training, and the pre-flight check at job creation."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.code_rewards import PASSES_TESTS, RIGHT, TESTS, WRONG

SAMPLES = [
    {"prompt": "Say a", "completion": "aaa", "example": {"target": "a"}},
    {"prompt": "Say b", "completion": "xyz", "example": {"target": "b"}},
]


def test_scores_errors_and_logs_are_returned(client: httpx.Client) -> None:
    response = client.post(
        "/v1/reward-functions/test",
        json={
            "reward_functions": {
                "match": {
                    "source": "def match(prompt, completion, example):\n"
                    "    print('checking', completion)\n"
                    "    return float(example['target'] in completion)\n",
                    "weight": 2.0,
                },
                "lengths": {
                    "source": "def lengths(prompts, completions, **kw):\n"
                    "    return [len(c) for c in completions]\n",
                },
                "broken": {
                    "source": "def broken(prompt, completion, example):\n"
                    "    return 1 / (completion != 'xyz')\n",
                },
            },
            "samples": SAMPLES,
        },
    )
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert results["match"]["scores"] == [1.0, 0.0]
    assert results["match"]["form"] == "sample"
    assert "checking aaa" in results["match"]["logs"]
    assert results["lengths"]["scores"] == [3.0, 3.0]
    assert results["lengths"]["form"] == "batch"
    assert results["broken"]["scores"] == [1.0, None]
    assert results["broken"]["errors"][0]["kind"] == "exception"
    assert results["broken"]["errors"][0]["sample_index"] == 1
    assert "ZeroDivisionError" in results["broken"]["errors"][0]["traceback"]
    assert results["broken"]["error_rate"] == 0.5
    assert response.json()["totals"] == [2.0 + 3.0 + 1.0, 3.0]


def test_code_that_cannot_load_is_400_naming_the_function(client: httpx.Client) -> None:
    response = client.post(
        "/v1/reward-functions/test",
        json={
            "reward_functions": {
                "needs_missing": {
                    "source": "import no_such_module_here\n"
                    "def needs_missing(prompt, completion, example):\n    return 1.0\n"
                }
            },
            "samples": SAMPLES,
        },
    )
    assert response.status_code == 400
    assert "needs_missing" in response.json()["detail"]
    assert "no_such_module_here" in response.json()["detail"]


def test_functions_run_on_dataset_rows(client: httpx.Client) -> None:
    rows = "\n".join(json.dumps({"prompt": f"p{i}", "n": i}) for i in range(3)).encode()
    dataset_id = client.post("/v1/datasets", files={"file": ("d.jsonl", rows)}).json()["id"]
    response = client.post(
        "/v1/reward-functions/test",
        json={
            "reward_functions": {
                "n": {"source": "def n(prompt, completion, example):\n    return example['n']\n"}
            },
            "dataset_id": dataset_id,
            "completions": ["a", "b", "c", "d"],
        },
    )
    assert response.status_code == 200, response.text
    assert response.json()["results"]["n"]["scores"] == [0.0, 1.0, 2.0, 0.0]


def test_job_whose_function_cannot_run_is_rejected_before_training(client: httpx.Client) -> None:
    rows = "\n".join(json.dumps({"prompt": f"p{i}"}) for i in range(4)).encode()
    dataset_id = client.post("/v1/datasets", files={"file": ("d.jsonl", rows)}).json()["id"]
    before = len(client.get("/v1/jobs", params={"limit": 1000}).json()["data"])
    response = client.post(
        "/v1/jobs",
        json={
            "dataset_id": dataset_id,
            "reward_functions": {
                "typo": {
                    "source": "def typo(prompt, completion, example):\n"
                    "    return example['answer']\n"
                }
            },
        },
    )
    assert response.status_code == 400, response.text
    detail = response.json()["detail"]
    assert "'typo'" in detail and "every pre-flight sample" in detail and "answer" in detail
    assert len(client.get("/v1/jobs", params={"limit": 1000}).json()["data"]) == before


def test_runtime_packages_must_be_plain_requirements(client: httpx.Client) -> None:
    response = client.post(
        "/v1/jobs",
        json={
            "dataset_id": "ds_x",
            "reward_functions": {"f": {"source": "def f(prompt, completion, example): return 1"}},
            "runtime_packages": ["--index-url=http://evil.example/simple"],
        },
    )
    assert response.status_code == 422
    assert "not a plain requirement" in response.text


# A code-execution reward as docs/guides/code-execution.md shows it: one Python process per
# sample, a few at a time.
PYTEST_REWARD = {"source": PASSES_TESTS, "max_concurrency": 4, "sample_timeout_s": 20}


def test_the_docs_show_the_tested_code_execution_reward() -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "guides" / "code-execution.md"
    assert PASSES_TESTS in page.read_text()


def test_a_reward_that_runs_pytest_scores_right_and_wrong_answers(client: httpx.Client) -> None:
    samples = [
        {"prompt": "Write add(a, b).", "completion": answer, "example": {"tests": TESTS}}
        for answer in (RIGHT, WRONG, "def add(a, b) return")
    ]
    body = {"reward_functions": {"passes_tests": PYTEST_REWARD}, "samples": samples}
    response = client.post("/v1/reward-functions/test", json=body)
    assert response.status_code == 200, response.text
    result = response.json()["results"]["passes_tests"]
    # Without pytest every sample says what to do (and a job would be refused at creation).
    assert result["scores"] == [None, None, None]
    assert "add it to the job's runtime_packages" in result["errors"][0]["message"]

    response = client.post(
        "/v1/reward-functions/test", json={**body, "runtime_packages": ["pytest"]}
    )
    assert response.status_code == 200, response.text
    result = response.json()["results"]["passes_tests"]
    assert result["scores"] == [1.0, 0.0, 0.0], result
    assert result["errors"] == []


def test_runtime_packages_that_cannot_install_are_a_400_naming_them(
    client: httpx.Client,
) -> None:
    response = client.post(
        "/v1/reward-functions/test",
        json={
            "reward_functions": {"passes_tests": PYTEST_REWARD},
            "samples": [{"prompt": "p", "completion": RIGHT, "example": {"tests": TESTS}}],
            "runtime_packages": ["rft-no-such-package-anywhere==0.0.1"],
        },
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "RuntimePackagesFailed"
    detail = response.json()["detail"]
    assert "pip could not install runtime packages" in detail
    assert "rft-no-such-package-anywhere" in detail

    response = client.post(
        "/v1/reward-functions/test",
        json={
            "reward_functions": {"passes_tests": PYTEST_REWARD},
            "samples": [{"prompt": "p", "completion": RIGHT, "example": {"tests": TESTS}}],
            "runtime_packages": ["pytest --index-url=http://evil.example/simple"],
        },
    )
    assert response.status_code == 422
    assert "not a plain requirement" in response.text
