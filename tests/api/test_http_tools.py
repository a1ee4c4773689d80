"""HTTP tools and endpoint graders at the API: declared in a job (ours and OpenAI's fine-tuning
API, with the unmodified openai client), checked at creation (a 400 naming the problem),
shown in the config, kept to the hosts the job was created with; an endpoint grader scored
through graders/run against real endpoints on the tests' public side (tests/public_network.py).

The stack has no worker (its jobs stay queued: the API tests' idle stack). Plain http goes to
the public side because the operator allows that host (RFT_SANDBOX_EGRESS_ALLOW), as a
deployment would for an internal tool service; everything else must be https.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy import create_engine, text

from service.secrets import unseal
from service.settings import Settings
from service.stack import LocalStack
from tests.public_network import HTTP_PORT, UNUSED_PUBLIC_ADDRESS, PublicHost
from tests.tiny import TINY_HYPERPARAMETERS

REWARD = "def score(prompt, completion, example):\n    return 1.0\n"
PARAMETERS = {
    "type": "object",
    "properties": {"key": {"type": "string", "description": "What to look up."}},
    "required": ["key"],
}
ROWS = [{"prompt": f"Look up {i}", "score": i / 4} for i in range(4)]
TOOL_TOKEN, GRADER_TOKEN = "sk-tool-4e1f0a9b", "grader-key-77c2d5"


@pytest.fixture(scope="module")
def endpoint_api(
    idle_api: tuple[LocalStack, httpx.Client], public_side: PublicHost
) -> tuple[LocalStack, httpx.Client]:
    """The API tests' idle stack (no workers), whose operator allows the public side's
    plain-http port (tests/api/conftest.py)."""
    return idle_api


@pytest.fixture
def client(endpoint_api: tuple[LocalStack, httpx.Client]) -> httpx.Client:
    return endpoint_api[1]


@pytest.fixture(scope="module")
def dataset_id(endpoint_api: tuple[LocalStack, httpx.Client]) -> str:
    rows = "\n".join(json.dumps(row) for row in ROWS).encode()
    response = endpoint_api[1].post("/v1/datasets", files={"file": ("d.jsonl", rows)})
    return str(response.json()["id"])


def lookup_tool(public_side: PublicHost, **fields: Any) -> dict[str, Any]:
    return {
        "type": "http",
        "name": "lookup",
        "description": "Looks a key up.",
        "parameters": PARAMETERS,
        "url": f"{public_side.http_url}/endpoint/echo/{uuid.uuid4().hex[:8]}",
        "headers": {"Authorization": "Bearer {{secrets.TOOL_KEY}}"},
        **fields,
    }


def http_job(dataset_id: str, tool: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "dataset_id": dataset_id,
        "reward_functions": {"score": {"source": REWARD}},
        "tools": [tool],
        "secrets": {"TOOL_KEY": "k-123"},
        "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 2, "tool_timeout_s": 5},
        **fields,
    }


def test_a_job_with_an_http_tool_shows_it_and_may_reach_its_host_alone(
    client: httpx.Client, dataset_id: str, public_side: PublicHost
) -> None:
    tool = lookup_tool(public_side)
    created = client.post("/v1/jobs", json=http_job(dataset_id, tool))
    assert created.status_code == 201, created.text
    job = created.json()
    assert job["egress_hosts"] == [f"{public_side.address}:{HTTP_PORT}"]
    assert job["allow_network"] is False
    path = f"/v1/jobs/{job['id']}/config"
    config = client.get(path).json()
    shown = config["tools"]["lookup"]
    assert shown["http"] == {**tool, "timeout_s": 10.0, "max_retries": 2}
    assert "def lookup(key: str)" in shown["source"] and shown["version"] == 1

    # A changed declaration is a new version of the tool; a host the job was not created with
    # is refused (its sandboxes' way out is fixed at creation).
    changed = {"http": {**tool, "description": "Finds a key."}}
    updated = client.put(
        path, json={**config, "tools": {"lookup": changed}}, headers={"If-Match": "*"}
    )
    assert updated.status_code == 200, updated.text
    assert updated.json()["changed_tools"] == ["lookup"]
    assert updated.json()["config"]["tools"]["lookup"]["http"]["description"] == "Finds a key."
    # The config read back and sent as it is changes nothing.
    again = client.put(path, json=updated.json()["config"], headers={"If-Match": "*"})
    assert again.status_code == 200 and again.json()["changed_tools"] == []
    # (Not any address of the public sides' range: one of those may be this machine's end of
    # a test process's veth, refused for that reason instead.)
    elsewhere = {"http": {**tool, "url": f"https://{UNUSED_PUBLIC_ADDRESS}/lookup"}}
    refused = client.put(
        path, json={**config, "tools": {"lookup": elsewhere}}, headers={"If-Match": "*"}
    )
    assert refused.status_code == 400
    detail = refused.json()["detail"]
    assert f"{UNUSED_PUBLIC_ADDRESS}:443 is not one this job was created with" in detail


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"url": "http://tools.example.com/lookup"}, "plain http: use https"),
        ({"url": "https://10.0.0.1/lookup"}, "10.0.0.1 is a private address"),
        ({"url": "https://127.0.0.1:8000/v1"}, "may not reach 127.0.0.1:8000"),
        ({"headers": {"Authorization": "{{secrets.MISSING}}"}}, "secret 'MISSING'"),
        ({"parameters": {"type": "object", "properties": {"k": {}}}}, "parameter 'k' needs a type"),
        ({"parameters": {"type": "string"}}, "must be a JSON schema of type object"),
    ],
)
def test_an_http_tool_that_could_never_be_called_is_400_naming_it(
    client: httpx.Client,
    dataset_id: str,
    public_side: PublicHost,
    change: dict[str, Any],
    problem: str,
) -> None:
    response = client.post(
        "/v1/jobs", json=http_job(dataset_id, lookup_tool(public_side, **change))
    )
    assert response.status_code == 400, response.text
    assert "'lookup'" in response.json()["detail"] and problem in response.json()["detail"]


def test_an_endpoint_grader_scores_through_graders_run(
    client: httpx.Client, public_side: PublicHost
) -> None:
    key = uuid.uuid4().hex[:8]

    def run(path: str) -> dict[str, Any]:
        grader = {"type": "endpoint", "name": "remote", "url": f"{public_side.http_url}{path}"}
        response = client.post(
            "/v1/fine_tuning/alpha/graders/run",
            json={"grader": grader, "model_sample": "42", "item": {"score": 0.75}},
        )
        assert response.status_code == 200, response.text
        return dict(response.json())

    assert run(f"/endpoint/score/{key}")["reward"] == 0.75
    flaky = run(f"/endpoint/flaky/{key}")  # 503, 503, then an answer (with no score)
    details = flaky["metadata"]["errors"]["python_grader_runtime_error_details"]
    assert "malformed_response" in details and '"tries": 3' in details
    malformed = run(f"/endpoint/malformed/{key}")["metadata"]["errors"]
    assert "malformed_response" in malformed["python_grader_runtime_error_details"]

    refused = client.post(
        "/v1/fine_tuning/alpha/graders/validate",
        json={"grader": {"type": "endpoint", "url": "http://tools.example.com/grade"}},
    )
    assert refused.status_code == 400 and "plain http" in refused.text


def test_an_agent_job_through_the_openai_client(
    endpoint_api: tuple[LocalStack, httpx.Client], public_side: PublicHost
) -> None:
    stack, tenant = endpoint_api
    key = tenant.headers["Authorization"].removeprefix("Bearer ")
    client = openai.OpenAI(base_url=f"{stack.base_url}/v1", api_key=key, max_retries=0)
    rows = [
        {"messages": [{"role": "user", "content": f"Look up {i}"}], "score": i / 4}
        for i in range(4)
    ]
    training = client.files.create(
        file=("train.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode()),
        purpose="fine-tune",
    )
    function_tool = {  # OpenAI's function-tool form, with the endpoint beside it
        "type": "function",
        "function": {"name": "lookup", "description": "Looks a key up.", "parameters": PARAMETERS},
        "url": f"{public_side.http_url}/endpoint/echo/{uuid.uuid4().hex[:8]}",
        # OpenAI's API has no job secrets: a token can only be written into the headers.
        "headers": {"Authorization": f"Bearer {TOOL_TOKEN}"},
    }
    grader = {
        "type": "endpoint",
        "name": "remote",
        "url": f"{public_side.http_url}/endpoint/score/x",
        "headers": {"X-Api-Key": GRADER_TOKEN},
    }
    job = client.fine_tuning.jobs.create(
        model="rft-tiny-tools",
        training_file=training.id,
        method={  # type: ignore[arg-type]
            "type": "reinforcement",
            "reinforcement": {  # type: ignore[typeddict-item]
                "grader": grader,
                "tools": [function_tool],
                "hyperparameters": {"n_epochs": 1, "batch_size": 2, "max_turns": 2},
            },
        },
    )
    assert job.status == "queued" and job.method is not None
    reinforcement = job.method.reinforcement
    assert reinforcement is not None and reinforcement.grader.type == "endpoint"  # type: ignore[union-attr]
    tools = (reinforcement.model_extra or {})["tools"]
    assert [t["name"] for t in tools] == ["lookup"] and tools[0]["url"] == function_tool["url"]

    # One system: our API shows the agent job, its tool and the host its sandboxes may reach.
    ours = tenant.get(f"/v1/jobs/{job.id}").json()
    assert ours["egress_hosts"] == [f"{public_side.address}:{HTTP_PORT}"]
    assert ours["hyperparameters"]["max_turns"] == 2
    config = tenant.get(f"/v1/jobs/{job.id}/config").json()
    assert config["tools"]["lookup"]["http"]["url"] == function_tool["url"]

    # The tokens were sealed as job secrets, which the headers now name: no answer shows them,
    # the database holds them encrypted, and the sandbox gets them as it gets any secret.
    tool_secret, grader_secret = (
        "HEADER_TOOL_LOOKUP_AUTHORIZATION",
        "HEADER_GRADER_REMOTE_X_API_KEY",
    )
    assert config["tools"]["lookup"]["http"]["headers"] == {
        "Authorization": f"{{{{secrets.{tool_secret}}}}}"
    }
    assert sorted(ours["secret_names"]) == [grader_secret, tool_secret]
    shown = [
        tenant.get(path).text
        for path in (f"/v1/jobs/{job.id}", f"/v1/jobs/{job.id}/config", "/v1/jobs")
    ]
    shown.append(client.fine_tuning.jobs.retrieve(job.id).model_dump_json())
    assert not [answer for answer in shown if TOOL_TOKEN in answer or GRADER_TOKEN in answer]
    engine = create_engine(stack.database_url or "")
    try:
        with engine.connect() as connection:
            sealed = connection.execute(
                text("SELECT secrets_sealed FROM jobs WHERE id = :id"), {"id": job.id}
            ).scalar_one()
    finally:
        engine.dispose()
    assert TOOL_TOKEN not in sealed and GRADER_TOKEN not in sealed
    assert unseal(sealed, Settings(state_dir=stack.state_dir)) == {
        tool_secret: f"Bearer {TOOL_TOKEN}",
        grader_secret: GRADER_TOKEN,
    }
