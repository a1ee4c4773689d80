"""Every reward-function form the docs show passes the pre-flight: the reward snippets of every
page (marked ``<!-- snippet: reward -->``, read from the pages), and the forms judges.md,
agent-jobs.md and docs/agents.md describe in prose, called as training calls it: at job
creation (jobs with and without tools), at config updates, and in
``POST /v1/reward-functions/test``. A function that is really broken is still refused, naming
the problem, and error details show the user's lines only, never the sandbox's files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.stack import LocalStack
from tests.code_rewards import TESTS
from tests.docs.snippets import documented_rewards
from tests.tiny import TINY_HYPERPARAMETERS

ADD = '''def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b
'''

# name -> source: every function of the docs' reward snippets (``<!-- snippet: reward -->``,
# tests/docs/snippets.py), read from the pages, with the runtime packages their markers name.
DOCUMENTED = documented_rewards()
RUNTIME_PACKAGES = sorted({p for reward in DOCUMENTED.values() for p in reward.runtime_packages})
NEED_PACKAGES = {name for name, reward in DOCUMENTED.items() if reward.runtime_packages}
FORMS = {
    **{name: reward.source for name, reward in DOCUMENTED.items()},
    # docs/guides/judges.md: per-sample functions may be async (its judge calls OpenAI).
    "judge": (
        "import asyncio\n\n\n"
        "async def judge(prompt, completion, example):\n"
        "    await asyncio.sleep(0)\n"
        "    return float(len(completion) > 3)\n"
    ),
    # docs/guides/agent-jobs.md "Rewards see the rollout" / docs/agents.md "Rewards": the
    # conversation as messages.
    "with_messages": (
        "def with_messages(prompt, completion, example, messages):\n"
        '    assert messages[-1]["role"] == "assistant"\n'
        '    return float(messages[-1]["content"] == completion)\n'
    ),
}
# docs/agents.md "Rewards": in an agent job a batch function gets the conversations as its
# completions (TRL's form).
CONVERSATIONS = (
    "def conversations(prompts, completions, **kwargs):\n"
    '    return [float(bool(c[-1]["content"])) for c in completions]\n'
)
# A function that is really broken: it fails on every sample, whatever it is given.
BROKEN = 'def broken(prompt, completion, example, messages):\n    return messages["score"]\n'


@pytest.fixture(scope="module")
def client(idle_api: tuple[LocalStack, httpx.Client]) -> httpx.Client:
    return idle_api[1]


@pytest.fixture(scope="module")
def dataset_id(client: httpx.Client) -> str:
    # The columns the documented functions read: an answer, and tests for code to pass.
    rows = "\n".join(
        json.dumps({"prompt": f"Say {word}", "answer": word, "tests": TESTS})
        for word in ("a", "b", "c", "d")
    ).encode()
    return str(client.post("/v1/datasets", files={"file": ("d.jsonl", rows)}).json()["id"])


def job_body(dataset_id: str, functions: dict[str, str], *, agent: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "dataset_id": dataset_id,
        "reward_functions": {name: {"source": source} for name, source in functions.items()},
        "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 2, "tool_timeout_s": 5},
    }
    if agent:
        body["tools"] = [{"name": "add", "source": ADD}]
    return body


def forms_of(agent: bool) -> list[str]:
    """The forms a job's pre-flight runs. A job with runtime packages gets no pre-flight (only
    its worker has them installed): functions that need packages are scored by the test
    endpoint, which installs them (test_every_documented_form_scores_in_the_test_endpoint)."""
    preflighted = [name for name in FORMS if name not in NEED_PACKAGES]
    return [*preflighted, "conversations"] if agent else preflighted


def source_of(name: str) -> str:
    return CONVERSATIONS if name == "conversations" else FORMS[name]


@pytest.mark.parametrize("agent", [False, True], ids=["plain job", "agent job"])
def test_every_documented_form_passes_the_preflight_at_creation_and_config_updates(
    client: httpx.Client, dataset_id: str, agent: bool
) -> None:
    for name in forms_of(agent):
        created = client.post(
            "/v1/jobs", json=job_body(dataset_id, {name: source_of(name)}, agent=agent)
        )
        assert created.status_code == 201, (name, created.text)

    job = client.post(
        "/v1/jobs", json=job_body(dataset_id, {"per_sample": FORMS["per_sample"]}, agent=agent)
    )
    assert job.status_code == 201, job.text
    path = f"/v1/jobs/{job.json()['id']}/config"
    for name in forms_of(agent):
        document = client.get(path).json()
        document["reward_functions"] = {name: {"source": source_of(name)}}
        for params in ({"dry_run": "true"}, {}):
            updated = client.put(path, json=document, params=params, headers={"If-Match": "*"})
            assert updated.status_code == 200, (name, params, updated.text)


@pytest.mark.parametrize("agent", [False, True], ids=["plain job", "agent job"])
def test_a_broken_function_is_still_refused_naming_the_problem(
    client: httpx.Client, dataset_id: str, agent: bool
) -> None:
    refused = client.post("/v1/jobs", json=job_body(dataset_id, {"broken": BROKEN}, agent=agent))
    assert refused.status_code == 400, refused.text
    error = refused.json()
    assert error["error"] == "InvalidRewardFunction"
    assert "'broken'" in error["detail"] and "every pre-flight sample" in error["detail"]
    assert "TypeError: list indices must be integers" in error["detail"]

    job = client.post(
        "/v1/jobs", json=job_body(dataset_id, {"per_sample": FORMS["per_sample"]}, agent=agent)
    )
    path = f"/v1/jobs/{job.json()['id']}/config"
    document = client.get(path).json()
    document["reward_functions"] = {"broken": {"source": BROKEN}}
    refused = client.put(path, json=document, headers={"If-Match": "*"})
    assert refused.status_code == 400, refused.text
    assert "'broken'" in refused.json()["detail"] and "list indices" in refused.json()["detail"]


def test_every_documented_form_scores_in_the_test_endpoint(
    client: httpx.Client, dataset_id: str
) -> None:
    functions = {name: {"source": source} for name, source in FORMS.items()}
    samples = [
        {"prompt": "Say a", "completion": "a and more", "example": {"answer": "a", "tests": TESTS}},
        {
            "prompt": [{"role": "user", "content": "Say b"}],
            "completion": "nothing",
            "example": {"answer": "b", "tests": TESTS},
        },
    ]
    for body in (
        {"samples": samples},
        {"dataset_id": dataset_id, "completions": ["a b c d", "b"], "rows": 2},
    ):
        response = client.post(
            "/v1/reward-functions/test",
            json={"reward_functions": functions, "runtime_packages": RUNTIME_PACKAGES, **body},
        )
        assert response.status_code == 200, response.text
        for name, result in response.json()["results"].items():
            assert result["errors"] == [], (name, result["errors"])
            assert None not in result["scores"], (name, result)


def test_the_gsm8k_tutorials_reward_module_scores_in_the_test_endpoint(
    client: httpx.Client,
) -> None:
    # docs/get-started/gsm8k.md sends examples/gsm8k/rewards.py whole as a reward module.
    source = (Path(__file__).resolve().parents[2] / "examples/gsm8k/rewards.py").read_text()
    names = ["correctness_reward_func", "int_reward_func", "strict_format_reward_func"]
    functions = {name: {"weight": 1.0} for name in names}
    good = "<reasoning>\n6 * 12 = 72\n</reasoning>\n<answer>\n72\n</answer>\n"
    samples = [
        {"prompt": "How many?", "completion": completion, "example": {"answer": "72"}}
        for completion in (good, "The answer is 72.")
    ]
    response = client.post(
        "/v1/reward-functions/test",
        json={"reward_module": {"source": source, "functions": functions}, "samples": samples},
    )
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    for name in names:
        assert results[name]["errors"] == [], (name, results[name]["errors"])
        assert results[name]["scores"] == [1.0, 0.0], (name, results[name])


def test_error_details_show_the_users_lines_only(client: httpx.Client, dataset_id: str) -> None:
    # Raised in the user's code, through the standard library: their file and line stay.
    raises = 'import json\n\n\ndef f(prompt, completion, example):\n    return json.loads("{")\n'
    # Raised by the sandbox calling the user's code (the decorator changed the signature):
    # only the message, no frames of the sandbox's own files.
    miscalled = (
        "def keep_one(function):\n"
        "    def wrapper(prompt):\n"
        "        return function(prompt, '', {})\n"
        "    return wrapper\n\n\n"
        "@keep_one\n"
        "def f(prompt, completion, example):\n"
        "    return 1.0\n"
    )
    samples = [{"prompt": "p", "completion": "c"}]
    tracebacks = []
    for source in (raises, miscalled):
        response = client.post(
            "/v1/reward-functions/test",
            json={"reward_functions": {"f": {"source": source}}, "samples": samples},
        )
        assert response.status_code == 200, response.text
        tracebacks.append(response.json()["results"]["f"]["errors"][0]["traceback"])
    assert '"<reward f v1>", line 5, in f' in tracebacks[0]
    assert "JSONDecodeError" in tracebacks[0]
    assert tracebacks[1].strip() == (
        "TypeError: keep_one.<locals>.wrapper() takes 1 positional argument but 3 were given"
    )

    # A load failure raised by the sandbox about the user's code: the detail is its message.
    not_a_function = "def f(prompt, completion, example):\n    return 1.0\n\n\nf = 3\n"
    refused = client.post("/v1/jobs", json=job_body(dataset_id, {"f": not_a_function}, agent=False))
    assert refused.status_code == 400, refused.text
    for text in (*tracebacks, refused.json()["detail"]):
        assert "child.py" not in text and "/opt/rft" not in text and "sandbox/" not in text
    assert "'f' is not a function after running the source" in refused.json()["detail"]
