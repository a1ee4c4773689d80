"""OpenAI's graders/run and graders/validate, called with the official openai package, score
as our own /v1/reward-functions/test does (same code, same sandbox), and refuse bad graders
in OpenAI's error shape."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from service.openai_compat.graders.compile import reward_functions
from service.openai_compat.graders.schemas import Grader
from service.stack import LocalStack

PYTHON_SOURCE = (
    "def grade(sample, item):\n"
    "    answer = sample['output_text'].strip()\n"
    "    return 1.0 if answer == item['answer'] else 0.25 * (item['answer'] in answer)\n"
)
MULTI_GRADER: dict[str, Any] = {
    "type": "multi",
    "name": "correct and close",
    "calculate_output": "0.7 * exact + 0.3 * close",
    "graders": {
        "exact": {"type": "python", "name": "exact", "source": PYTHON_SOURCE},
        "close": {
            "type": "text_similarity",
            "name": "close",
            "input": "{{sample.output_text}}",
            "reference": "{{item.answer}}",
            "evaluation_metric": "fuzzy_match",
        },
    },
}
SAMPLES = [("42", {"answer": "42"}), ("It is 42.", {"answer": "42"}), ("7", {"answer": "42"})]


@pytest.fixture
def openai_client(stack: LocalStack, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.base_url}/v1", api_key=api_key, max_retries=0)


def test_graders_run_scores_as_the_reward_function_test(
    openai_client: openai.OpenAI, client: httpx.Client
) -> None:
    runs = [
        openai_client.fine_tuning.alpha.graders.run(
            grader=MULTI_GRADER,  # type: ignore[arg-type]
            model_sample=sample,
            item=item,
        )
        for sample, item in SAMPLES
    ]
    assert runs[0].reward == pytest.approx(1.0)
    assert runs[1].sub_rewards["exact"] == 0.25
    assert runs[2].sub_rewards == {"exact": 0.0, "close": 0.0}
    assert runs[0].metadata.name == "correct and close"
    assert runs[0].metadata.type == "multi"
    assert not runs[0].metadata.errors.python_grader_runtime_error

    # The same grader, as the reward functions a job trains with, through our test endpoint.
    from pydantic import TypeAdapter

    grader = TypeAdapter(Grader).validate_python(MULTI_GRADER)
    functions = {
        name: {"source": f.source, "weight": f.weight}
        for name, f in reward_functions(grader).items()
    }
    tested = client.post(
        "/v1/reward-functions/test",
        json={
            "reward_functions": functions,
            "samples": [{"prompt": "", "completion": s, "example": i} for s, i in SAMPLES],
        },
    )
    assert tested.status_code == 200, tested.text
    results = tested.json()["results"]
    assert results["correct_and_close"]["scores"] == [run.reward for run in runs]
    assert results["correct_and_close__exact"]["scores"] == [
        run.sub_rewards["exact"] for run in runs
    ]
    assert tested.json()["totals"] == [run.reward for run in runs]


def test_a_failing_python_grader_reports_its_error(openai_client: openai.OpenAI) -> None:
    run = openai_client.fine_tuning.alpha.graders.run(
        grader={"type": "python", "name": "boom", "source": "def grade(s, i):\n    return 1 / 0\n"},
        model_sample="x",
    )
    assert run.reward == 0.0
    assert run.metadata.errors.python_grader_runtime_error
    assert "ZeroDivisionError" in (run.metadata.errors.python_grader_runtime_error_details or "")


def test_validate_returns_the_grader_or_refuses_it(openai_client: openai.OpenAI) -> None:
    validated = openai_client.fine_tuning.alpha.graders.validate(grader=MULTI_GRADER)  # type: ignore[arg-type]
    assert validated.grader is not None
    assert validated.grader.type == "multi"

    refused = {
        "type": "text_similarity",
        "name": "c",
        "input": "{{sample.output_text}}",
        "reference": "x",
        "evaluation_metric": "cosine",
    }
    with pytest.raises(openai.BadRequestError) as cosine:
        openai_client.fine_tuning.alpha.graders.validate(grader=refused)  # type: ignore[arg-type]
    assert "embeddings" in cosine.value.message
    with pytest.raises(openai.BadRequestError, match="RFT_GRADER_JUDGE_BASE_URL"):
        openai_client.fine_tuning.alpha.graders.validate(
            grader={
                "type": "score_model",
                "name": "j",
                "model": "rft-tiny",
                "input": [{"role": "user", "content": "{{sample.output_text}}"}],
            }
        )


def test_bad_graders_get_openai_errors(client: httpx.Client) -> None:
    cases = [
        ({"grader": {"type": "nope", "name": "x"}, "model_sample": "a"}, "grader"),
        (
            {
                "grader": {**MULTI_GRADER, "calculate_output": "exact + __import__('os')"},
                "model_sample": "a",
            },
            "grader.calculate_output",
        ),
        ({"grader": MULTI_GRADER}, "model_sample"),
    ]
    for body, param in cases:
        response = client.post("/v1/fine_tuning/alpha/graders/run", json=body)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["type"] == "invalid_request_error"
        assert error["param"] == param, error
    # Refused before any route runs (NaN is not JSON): the same shape on these routes.
    not_json = client.post(
        "/v1/fine_tuning/alpha/graders/run",
        content=b'{"grader": NaN}',
        headers={"Content-Type": "application/json"},
    )
    assert not_json.status_code == 400, not_json.text
    assert not_json.json()["error"]["type"] == "invalid_request_error"
    unauthorised = httpx.post(
        f"{client.base_url}/v1/fine_tuning/alpha/graders/validate", json={"grader": MULTI_GRADER}
    )
    assert unauthorised.status_code == 401
    assert "Authorization" in unauthorised.json()["error"]["message"]
