"""Agent jobs in the API: tools and environments are loaded in the sandbox at creation and at
each config update (code that cannot load is a 400 naming it), stored in versions, and a
rollout's trajectory and a step's agent metrics come back as the worker recorded them.

The API here has no worker: these jobs are only created and edited, never trained, so their
status stays `queued` whatever the training code does with tools.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from service.db import to_sqlalchemy_url
from service.stack import LocalStack
from tests.tiny import TINY_HYPERPARAMETERS
from workers.step_store import record_step
from workers.training.step_records import CompletionRecord, FunctionStepMetrics, StepRecord

REWARD = "def score(prompt, completion, example):\n    return 1.0\n"
ADD = '''def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b
'''
COUNTER = '''class Counter:
    """A counter the model increments."""

    def reset(self, **row):
        self.count = 0
        return "The counter is at 0."

    def increment(self, by: int) -> int:
        """Add to the counter.

        Args:
            by: How much to add.
        """
        self.count += by
        return self.count

    def get_reward(self) -> float:
        return float(self.count == 3)
'''
WITHOUT_REWARD = COUNTER.split("    def get_reward")[0]


@pytest.fixture(scope="module")
def dataset_id(idle_api: tuple[LocalStack, httpx.Client]) -> str:
    _, client = idle_api
    rows = "\n".join(json.dumps({"prompt": f"Count to {i}"}) for i in range(4)).encode()
    return str(client.post("/v1/datasets", files={"file": ("d.jsonl", rows)}).json()["id"])


@pytest.fixture
def client(idle_api: tuple[LocalStack, httpx.Client]) -> httpx.Client:
    return idle_api[1]


def agent_job(dataset_id: str, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "dataset_id": dataset_id,
        "reward_functions": {"score": {"source": REWARD}},
        "tools": [{"name": "add", "source": ADD}],
        "environment": {"source": COUNTER, "class_name": "Counter", "weight": 0.5},
        "hyperparameters": {**TINY_HYPERPARAMETERS, "train_steps": 2, "tool_timeout_s": 5},
    }
    body.update(fields)
    return body


def create(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    return dict(response.json())


def test_a_job_with_a_tool_and_an_environment_shows_them_in_its_config(
    client: httpx.Client, dataset_id: str
) -> None:
    job = create(client, agent_job(dataset_id))
    config = client.get(f"/v1/jobs/{job['id']}/config").json()
    assert config["tools"] == {
        "add": {"source": ADD, "http": None, "version": 1, "label": "add_v1"}
    }
    # The shorthand's environment is named after its class.
    assert config["environments"] == {
        "Counter": {
            "source": COUNTER,
            "class_name": "Counter",
            "weight": 0.5,
            "version": 1,
            "label": "Counter_v1",
        }
    }


def test_an_environment_with_get_reward_may_stand_in_for_reward_functions(
    client: httpx.Client, dataset_id: str
) -> None:
    body = agent_job(
        dataset_id, environments={"counter": {"source": COUNTER, "class_name": "Counter"}}
    )
    del body["reward_functions"], body["environment"]
    job = create(client, body)
    config = client.get(f"/v1/jobs/{job['id']}/config").json()
    assert config["reward_functions"] == {} and list(config["environments"]) == ["counter"]

    without = {"counter": {"source": WITHOUT_REWARD, "class_name": "Counter"}}
    refused = client.post("/v1/jobs", json={**body, "environments": without})
    assert refused.status_code == 400, refused.text
    assert "'counter'" in refused.json()["detail"] and "get_reward" in refused.json()["detail"]
    # Tools alone score nothing: reward functions are still needed.
    tools_only = agent_job(dataset_id, reward_functions={})
    del tools_only["environment"]
    assert client.post("/v1/jobs", json=tools_only).status_code == 422


@pytest.mark.parametrize(
    ("fields", "named", "problem"),
    [
        ({"tools": [{"name": "add", "source": "def add(a: int:\n"}]}, "tool 'add'", "SyntaxError"),
        ({"tools": [{"name": "mul", "source": ADD}]}, "tool 'mul'", "no function named 'mul'"),
        (
            {"environment": {"source": COUNTER, "class_name": "Missing"}},
            "environment 'Missing'",
            "no class named 'Missing'",
        ),
        (
            {"environment": {"source": "class Counter:\n    pass\n", "class_name": "Counter"}},
            "environment 'Counter'",
            "no reset",
        ),
        (
            {"tools": [{"name": "increment", "source": ADD.replace("def add", "def increment")}]},
            "tool 'increment'",
            "method of environment 'Counter'",
        ),
    ],
)
def test_code_that_cannot_load_is_400_naming_it(
    client: httpx.Client, dataset_id: str, fields: dict[str, Any], named: str, problem: str
) -> None:
    response = client.post("/v1/jobs", json=agent_job(dataset_id, **fields))
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "InvalidAgentCode"
    assert named in response.json()["detail"] and problem in response.json()["detail"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"environments": {"other": {"source": COUNTER, "class_name": "Counter"}}},
            "not both",
        ),
        ({"tools": [{"name": f"t{i}", "source": ADD} for i in range(33)]}, "at most 32"),
        ({"tools": [{"name": "add", "source": ADD}] * 2}, "given twice"),
        ({"tools": [{"name": "no-tool", "source": ADD}]}, "pattern"),
    ],
)
def test_malformed_agent_fields_are_422(
    client: httpx.Client, dataset_id: str, fields: dict[str, Any], message: str
) -> None:
    response = client.post("/v1/jobs", json=agent_job(dataset_id, **fields))
    assert response.status_code == 422, response.text
    assert message in response.text


def test_a_changed_tool_gets_a_new_version_and_broken_code_is_refused(
    client: httpx.Client, dataset_id: str
) -> None:
    job = create(client, agent_job(dataset_id))
    path = f"/v1/jobs/{job['id']}/config"
    document = client.get(path).json()
    document["tools"]["add"]["source"] = ADD.replace("return a + b", "return b + a")
    document["environments"]["Counter"]["weight"] = 2.0

    updated = client.put(path, json=document, headers={"If-Match": '"1"'})
    assert updated.status_code == 200, updated.text
    body = updated.json()
    assert body["changed_tools"] == ["add"] and body["added_tools"] == []
    # A weight is a new config version, not a new version of the environment's code.
    assert body["changed_environments"] == [] and body["changed_functions"] == []
    assert body["config"]["tools"]["add"]["label"] == "add_v2"
    assert body["config"]["environments"]["Counter"]["weight"] == 2.0
    assert body["config"]["environments"]["Counter"]["version"] == 1

    # Left out, tools and environments stay; given, the missing ones go.
    kept = client.put(
        path, json={"reward_functions": document["reward_functions"]}, headers={"If-Match": "*"}
    ).json()
    assert kept["config"]["tools"]["add"]["version"] == 2 and kept["removed_tools"] == []
    removed = client.put(path, json={**document, "tools": {}}, headers={"If-Match": "*"}).json()
    assert removed["removed_tools"] == ["add"] and removed["config"]["tools"] == {}

    broken = {**document, "tools": {"add": {"source": "def add(:\n"}}}
    refused = client.put(path, json=broken, headers={"If-Match": "*"})
    assert refused.status_code == 400 and "tool 'add'" in refused.json()["detail"]
    refused = client.put(path, json=broken, params={"dry_run": "true"})
    assert refused.status_code == 400 and "tool 'add'" in refused.json()["detail"]
    versions = client.get(f"{path}/versions").json()
    assert [v["version"] for v in versions] == [1, 2, 3, 4]
    assert versions[0]["tools"]["add"]["version"] == 1


def test_a_job_created_without_tools_cannot_gain_them(
    client: httpx.Client, dataset_id: str
) -> None:
    """Its trainer has no tool loop: tools given later would never be called."""
    job = create(client, agent_job(dataset_id, tools=[], environment=None))
    path = f"/v1/jobs/{job['id']}/config"
    document = client.get(path).json()
    assert document["tools"] == {} and document["environments"] == {}
    document["tools"] = {"add": {"source": ADD}}
    refused = client.put(path, json=document, headers={"If-Match": "*"})
    assert refused.status_code == 400, refused.text
    assert "created without tools or environments" in refused.json()["detail"]
    assert client.get(path).json()["version"] == 1  # nothing stored


def test_a_recorded_trajectory_and_agent_metrics_come_back(
    idle_api: tuple[LocalStack, httpx.Client], dataset_id: str
) -> None:
    stack, client = idle_api
    job = create(client, agent_job(dataset_id))
    trajectory = [
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "increment", "arguments": {"by": 3}}}
        ]},
        {"role": "tool", "name": "increment", "content": "3", "duration_s": 0.01, "error": None},
        {"role": "assistant", "content": "Done: 3\ttabs\nand lines\\ kept"},
    ]  # fmt: skip
    metrics = {"tool_calls_per_rollout": 1.0, "tools": {"increment": {"calls": 1, "errors": 0}}}
    record = StepRecord(
        step=1,
        config_version=1,
        reward_mean=1.0,
        reward_std=0.0,
        loss=0.0,
        kl=None,
        learning_rate=1e-5,
        duration_s=0.5,
        functions={"score": FunctionStepMetrics("score", 1, 1.0, 1.0, 0.0, 2, 0)},
        completions=[
            CompletionRecord(
                prompt_index=0,
                group_position=position,
                dataset_index=0,
                prompt="Count to 0",
                completion="Done: 3",
                scores={"score": 1.0},
                total=1.0,
                advantage=0.0,
                token_count=9,
                trajectory=trajectory if position == 0 else None,
            )
            for position in range(2)
        ],
        agent_metrics=metrics,
    )
    # Stored as the worker stores a step (workers.step_store), COPY included.
    engine = create_engine(to_sqlalchemy_url(stack.database_url or ""))
    try:
        with Session(engine) as session, session.begin():
            record_step(session, job["id"], record)
    finally:
        engine.dispose()

    completions = client.get(f"/v1/jobs/{job['id']}/completions").json()["data"]
    assert [c["trajectory"] for c in completions] == [trajectory, None]
    steps = client.get(f"/v1/jobs/{job['id']}/steps").json()["data"]
    assert steps[0]["agent_metrics"] == metrics

    # A dry run re-scores the recorded rollouts: a function reading `messages` sees them.
    used_tools = (
        "def used_tools(prompt, completion, example, messages):\n"
        '    return float(any(m["role"] == "tool" for m in messages))\n'
    )
    dry_run = client.put(
        f"/v1/jobs/{job['id']}/config",
        params={"dry_run": "true"},
        json={"reward_functions": {"used_tools": {"source": used_tools}}},
    )
    assert dry_run.status_code == 200, dry_run.text
    rescored = dry_run.json()["completions"]
    assert [c["new_scores"]["used_tools"] for c in rescored] == [1.0, 0.0]


def documented(signature: str, *arguments: str, body: str = "return 0") -> str:
    """A tool whose docstring describes ``arguments`` (an `Args:` line each)."""
    lines = "".join(f"        {argument}: The {argument}.\n" for argument in arguments)
    return f'def {signature}:\n    """A tool.\n\n    Args:\n{lines}    """\n    {body}\n'


def environment_with(method: str) -> str:
    """An environment class whose one tool is ``method`` (source indented as a method)."""
    indented = "".join(f"    {line}\n" if line else "\n" for line in method.splitlines())
    return f"class Box:\n    def reset(self, **row):\n        return None\n\n{indented}"


# The same table goes to the API (a 400 at job creation, or a job) and to the worker's loader:
# (tool source or None, environment source or None, refused, what the refusal says).
VALIDATION_CASES = {
    "a valid tool": (documented("f(x: int, y: str = 'a') -> int", "x", "y"), None, False, ""),
    "no type hints": (documented("f(x)", "x"), None, True, "every parameter needs a type hint"),
    "*args and **kwargs beside typed parameters": (
        documented("f(x: int, *rest, **more) -> int", "x"),
        None,
        False,
        "",
    ),
    "no docstring": ("def f(x: int) -> int:\n    return x\n", None, True, "needs a docstring"),
    "a parameter missing from Args": (
        documented("f(x: int, y: int)", "x"),
        None,
        True,
        "no description of 'y'",
    ),
    "a default JSON cannot carry": (
        documented("f(x: float = float('nan'))", "x"),
        None,
        True,
        "not JSON-compatible",
    ),
    "a hint no schema describes": (
        "from pathlib import Path\n\n\n" + documented("f(x: Path)", "x"),
        None,
        True,
        "cannot be shown to the model",
    ),
    "a tuple of one element": (documented("f(x: tuple[int])", "x"), None, True, "tuple of one"),
    "a positional-only parameter": (documented("f(x: int, /)", "x"), None, True, "positional"),
    "an environment with reset and a documented tool": (
        None,
        environment_with(documented("put(self, item: str) -> str", "item")),
        False,
        "",
    ),
    "an environment without reset": (
        None,
        "class Box:\n    pass\n",
        True,
        "no reset",
    ),
    "an environment tool without type hints": (
        None,
        environment_with(documented("put(self, item)", "item")),
        True,
        "Box.put(item): every parameter needs a type hint",
    ),
}


def api_verdict(client: httpx.Client, dataset_id: str, tool: str | None, env: str | None) -> str:
    """'' for code the API takes, else the 400's detail."""
    body = agent_job(dataset_id, tools=[{"name": "f", "source": tool}] if tool else [])
    body["environment"] = {"source": env or COUNTER, "class_name": "Box" if env else "Counter"}
    response = client.post("/v1/jobs", json=body)
    if response.status_code == 201:
        return ""
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "InvalidAgentCode"
    return str(response.json()["detail"])


def worker_verdict(tool: str | None, env: str | None) -> str:
    """'' for code the worker's loader takes, else its AgentCodeError's message."""
    from sandbox.agent_api import AgentCodeError, AgentLimits, EnvironmentSpec, ToolSpec
    from sandbox.agent_host import create_agent_sandbox
    from service.settings import get_settings, sandbox_settings
    from workers.training.agents.session import AgentSession

    tools = [ToolSpec(name="f", source=tool)] if tool else []
    environments = [
        EnvironmentSpec(name="Box", source=env, class_name="Box")
        if env
        else EnvironmentSpec(name="Counter", source=COUNTER, class_name="Counter")
    ]
    settings = sandbox_settings(get_settings(), allow_network=False, secrets={})
    with create_agent_sandbox(settings, AgentLimits(tool_timeout_s=5)) as sandbox:
        try:
            AgentSession(sandbox, rows=[], index_column="index").load(tools, environments)
        except AgentCodeError as error:
            return error.message
    return ""


@pytest.mark.parametrize("case", list(VALIDATION_CASES))
def test_the_api_and_the_worker_judge_agent_code_alike(
    client: httpx.Client, dataset_id: str, case: str
) -> None:
    tool, env, refused, reason = VALIDATION_CASES[case]
    from_api = api_verdict(client, dataset_id, tool, env)
    from_worker = worker_verdict(tool, env)
    assert bool(from_api) is bool(from_worker) is refused, (from_api, from_worker)
    assert reason in from_api and reason in from_worker
    assert from_worker in from_api  # the API adds which tool or environment it is


def test_invalid_agent_code_details_show_the_users_lines_only(
    client: httpx.Client, dataset_id: str
) -> None:
    # Raised by the user's module: their file and line stay, the sandbox's frames go.
    raising = "import json\n\nSETTINGS = json.loads('{')\n\n\n" + ADD
    # Raised by the sandbox reading the user's function: the message only.
    unreadable = ADD + "\n\nadd.__signature__ = 5\n"
    details = []
    for source in (raising, unreadable):
        response = client.post(
            "/v1/jobs", json=agent_job(dataset_id, tools=[{"name": "add", "source": source}])
        )
        assert response.status_code == 400, response.text
        details.append(response.json()["detail"])
    assert '"<tool add v1>", line 3, in <module>' in details[0]
    assert "JSONDecodeError" in details[0]
    assert "TypeError: unexpected object 5 in __signature__ attribute" in details[1]
    for detail in details:
        assert "tool 'add'" in detail
        assert "agent_child.py" not in detail and "agent_code_rules.py" not in detail
        assert "/opt/rft" not in detail and "child.py" not in detail and "/child/" not in detail
