"""Agent jobs through the SDK and the CLI: the tools and environments a job sends (checked in
the JSON that leaves the client, through httpx's mock transport, then once against the real
stack), and the trajectories and agent metrics it reads back, typed and printed turn by turn."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner

import rft
from rft.agents import trajectory_lines
from rft.cli import app as cli_app
from rft.cli import context as cli_context
from rft.cli.files import config_to_yaml, read_config, read_job_spec
from tests.sdk.agent_records import COMPLETION, STEP
from tests.tiny import TINY_HYPERPARAMETERS

TOOLS_FILE = '''import math

PRECISION = 4


def square_root(x: float) -> float:
    """The square root of x.

    Args:
        x: A number at least 0.
    """
    return round(math.sqrt(x), PRECISION)
'''

ENVIRONMENT_FILE = '''class Counter:
    def reset(self, **row):
        self.count = int(row.get("start", 0))

    def add(self, n: int) -> int:
        """Add n to the counter.

        Args:
            n: How much to add.
        """
        self.count += n
        return self.count

    def get_reward(self) -> float:
        return float(self.count == 10)
'''


def multiply(a: float, b: float) -> float:
    """Multiply two numbers.

    Args:
        a: The first.
        b: The second.
    """
    return a * b


async def fetch_length(url: str) -> int:
    """The length of a URL.

    Args:
        url: Any text.
    """
    import asyncio

    await asyncio.sleep(0)
    return len(url)


PRECISION = 2


def uses_a_module_constant(x: float) -> float:
    """Rounds x.

    Args:
        x: A number.
    """
    return round(x, PRECISION)


def make_closure(factor: float) -> Callable[[float], float]:
    def scaled(x: float) -> float:
        return x * factor

    return scaled


JOB: dict[str, Any] = {
    "id": "job_1",
    "name": None,
    "status": "queued",
    "failure_reason": None,
    "base_model": "rft-tiny",
    "dataset_id": "ds_1",
    "hyperparameters": {},
    "config_version": 1,
    "applied_config_version": None,
    "steps_completed": 0,
    "allow_network": False,
    "created_at": "2026-11-25T00:00:00Z",
    "started_at": None,
    "finished_at": None,
}


class RecordingServer:
    """httpx's mock transport: keeps every request and answers as the server would."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.method == "POST" and request.url.path == "/v1/jobs":
            return httpx.Response(201, json=JOB)
        if request.url.path.endswith("/completions"):
            return httpx.Response(200, json={"data": [COMPLETION], "has_more": False})
        return httpx.Response(404, json={"detail": "not here"})

    def sent_json(self) -> dict[str, Any]:
        return dict(json.loads(self.requests[-1].content))


@pytest.fixture
def server() -> RecordingServer:
    return RecordingServer()


@pytest.fixture
def client(server: RecordingServer) -> Iterator[rft.Client]:
    http_client = httpx.Client(base_url="http://rft.test", transport=httpx.MockTransport(server))
    with rft.Client(api_key="k", base_url="http://rft.test", http_client=http_client) as client:
        yield client


@pytest.fixture
def code_files(tmp_path: Path) -> Path:
    (tmp_path / "tools.py").write_text(TOOLS_FILE)
    (tmp_path / "counter.py").write_text(ENVIRONMENT_FILE)
    return tmp_path


def test_tools_and_an_environment_travel_as_source(
    client: rft.Client, server: RecordingServer, code_files: Path
) -> None:
    client.jobs.create(
        dataset="ds_1",
        reward_functions={"f": "def f(prompt, completion, example):\n    return 1.0\n"},
        tools=[multiply, fetch_length, rft.Tool.from_file(code_files / "tools.py", "square_root")],
        environment=rft.Environment.from_file(code_files / "counter.py", "Counter", weight=0.5),
        hyperparameters=rft.Hyperparameters(max_turns=4, tool_timeout_s=5.0),
    )
    body = server.sent_json()
    tools = {tool["name"]: tool["source"] for tool in body["tools"]}
    assert list(tools) == ["multiply", "fetch_length", "square_root"]
    # A function is its own source, dedented, ready to exec; a file travels whole.
    assert tools["multiply"].startswith("def multiply(a: float, b: float) -> float:\n")
    assert tools["fetch_length"].startswith("async def fetch_length(url: str) -> int:\n")
    namespace: dict[str, Any] = {}
    exec(tools["multiply"], namespace)
    assert namespace["multiply"](6, 7) == 42
    assert tools["square_root"] == TOOLS_FILE
    assert body["environment"] == {
        "source": ENVIRONMENT_FILE,
        "class_name": "Counter",
        "weight": 0.5,
    }
    assert "environments" not in body
    assert body["hyperparameters"] == {"max_turns": 4, "tool_timeout_s": 5.0}


def test_an_http_tool_travels_as_its_declaration_from_the_sdk_and_a_job_file(
    client: rft.Client, server: RecordingServer, tmp_path: Path
) -> None:
    lookup = rft.HttpTool(
        name="lookup",
        url="https://tools.example.com/lookup",
        parameters={"type": "object", "properties": {"id": {"type": "string"}}},
        headers={"Authorization": "Bearer {{secrets.KEY}}"},
    )
    client.jobs.create(dataset="ds_1", reward_functions={"f": multiply}, tools=[lookup])
    [sent] = server.sent_json()["tools"]
    assert sent == {"type": "http", **lookup.model_dump()}

    job_file = tmp_path / "job.yaml"
    job_file.write_text(
        yaml.safe_dump(
            {
                "dataset": "ds_1",
                "reward_functions": {"f": {"source": "def f(prompt, completion, example): ..."}},
                "tools": [{"type": "http", **lookup.model_dump()}],
            }
        )
    )
    assert read_job_spec(job_file)["tools"] == [lookup]
    # A config's HTTP tool is written as declared and sent back as its declaration.
    config = rft.JobConfig.model_validate(
        {
            "job_id": "job_1",
            "version": 1,
            "reward_functions": {"f": {"source": "def f(prompt, completion, example): ..."}},
            "tools": {"lookup": {"source": "...", "http": lookup.model_dump()}},
        }
    )
    written = yaml.safe_load(config_to_yaml(config))
    assert written["tools"] == {"lookup": lookup.model_dump()}
    config_file = tmp_path / "config.yaml"
    config_file.write_text(config_to_yaml(config))
    assert read_config(config_file).tools["lookup"].to_request()["http"]["url"] == lookup.url


def test_a_job_without_agent_parts_sends_none(client: rft.Client, server: RecordingServer) -> None:
    client.jobs.create(dataset="ds_1", reward_functions={"f": multiply})
    body = server.sent_json()
    assert not {"tools", "environment", "environments"} & set(body)


def test_the_async_client_sends_named_environments(server: RecordingServer) -> None:
    environment = rft.Environment(source=ENVIRONMENT_FILE, class_name="Counter")

    async def create() -> None:
        http_client = httpx.AsyncClient(transport=httpx.MockTransport(server))
        async with rft.AsyncClient(
            api_key="k", base_url="http://rft.test", http_client=http_client
        ) as client:
            await client.jobs.create(
                dataset="ds_1", tools=[multiply], environments={"counter": environment}
            )

    asyncio.run(create())
    body = server.sent_json()
    assert body["environments"] == {
        "counter": {"source": ENVIRONMENT_FILE, "class_name": "Counter", "weight": 1.0}
    }
    assert [tool["name"] for tool in body["tools"]] == ["multiply"]


def test_tools_that_cannot_travel_are_refused_before_sending(
    client: rft.Client, server: RecordingServer, code_files: Path
) -> None:
    refused: list[tuple[Any, str]] = [
        (lambda x: x, "lambda"),
        (make_closure(2.0), "closure over factor"),
        (uses_a_module_constant, r"PRECISION.*rft\.Tool\.from_file"),
        (len, "not a Python function"),
    ]
    for tool, message in refused:
        with pytest.raises(rft.AgentSourceError, match=message):
            client.jobs.create(dataset="ds_1", tools=[tool])
    with pytest.raises(rft.AgentSourceError, match="two tools are named 'multiply'"):
        client.jobs.create(dataset="ds_1", tools=[multiply, multiply])
    with pytest.raises(rft.AgentSourceError, match="no top-level function 'cube'"):
        rft.Tool.from_file(code_files / "tools.py", "cube")
    with pytest.raises(rft.AgentSourceError, match="no top-level class 'Missing'"):
        rft.Environment.from_file(code_files / "counter.py", "Missing")
    with pytest.raises(rft.AgentSourceError, match="not both"):
        environment = rft.Environment(source=ENVIRONMENT_FILE, class_name="Counter")
        client.jobs.create(dataset="ds_1", environment=environment, environments={"c": environment})
    assert server.requests == []


def test_a_completion_with_a_trajectory_and_a_step_with_agent_metrics_are_typed() -> None:
    completion = rft.Completion.model_validate(COMPLETION)
    assert completion.trajectory is not None and completion.truncated
    first, answer, _, failed, last = completion.trajectory
    assert isinstance(first, rft.AssistantMessage)
    assert first.tool_calls == [rft.ToolCall(name="multiply", arguments={"a": 6, "b": 7})]
    assert isinstance(answer, rft.ToolMessage) and answer.content == "42"
    assert isinstance(failed, rft.ToolMessage) and failed.error is not None
    assert (failed.error.kind, failed.duration_s) == ("timeout", 30.0)
    assert isinstance(last, rft.AssistantMessage) and last.truncated

    # A single-answer job's completion, and a role this client does not know yet.
    plain = rft.Completion.model_validate({**COMPLETION, "trajectory": None})
    assert plain.trajectory is None and not plain.truncated
    newer = rft.Completion.model_validate(
        {**COMPLETION, "trajectory": [{"role": "observation", "content": "x", "extra": 1}]}
    )
    assert newer.trajectory is not None and isinstance(newer.trajectory[0], rft.OtherMessage)

    # Arguments the model wrote as bad JSON come as text; a tool's answer may end the rollout.
    cut_after_a_tool = rft.Completion.model_validate(
        {
            **COMPLETION,
            "trajectory": [
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"name": "multiply", "arguments": "{a: 6"}],
                },
                {
                    "role": "tool",
                    "name": "multiply",
                    "content": "bad arguments",
                    "error": {"kind": "bad_arguments", "message": "not a JSON object"},
                    "duration_s": 0.0,
                    "truncated": True,
                },
            ],
        }
    )
    assert cut_after_a_tool.truncated and cut_after_a_tool.trajectory is not None
    assert trajectory_lines(cut_after_a_tool.trajectory) == [
        "  -> multiply({a: 6)",
        "  !! multiply bad_arguments: not a JSON object",
        "[truncated: the rollout was cut off here]",
    ]

    step = rft.Step.model_validate(STEP)
    assert step.agent_metrics is not None
    assert step.agent_metrics.turns_per_rollout == 2.5
    assert step.agent_metrics.tools["fetch_length"].error_rate == 0.25
    assert step.agent_metrics.tools["fetch_length"].error_kinds == {"timeout": 1}
    assert rft.Step.model_validate({**STEP, "agent_metrics": None}).agent_metrics is None


def test_a_config_reads_and_sends_back_tools_and_environments(code_files: Path) -> None:
    config = rft.JobConfig.model_validate(
        {
            "version": 3,
            "reward_functions": {},
            "tools": {"multiply": {"source": "def multiply(a, b): ...", "version": 2}},
            "environments": {
                "counter": {
                    "source": ENVIRONMENT_FILE,
                    "class_name": "Counter",
                    "weight": 1.0,
                    "version": 1,
                    "label": "counter_v1",
                }
            },
        }
    )
    assert config.tools["multiply"].version == 2
    # Assigned like reward functions: a function, rft.Tool or Environment becomes its config.
    config.tools["multiply"] = multiply
    config.environments["counter"] = rft.Environment.from_file(
        code_files / "counter.py", "Counter", weight=2.0
    )
    body = config.to_update_request()
    assert body["tools"] == {"multiply": {"source": rft.Tool.from_function(multiply).source}}
    assert body["environments"]["counter"] == {
        "source": ENVIRONMENT_FILE,
        "class_name": "Counter",
        "weight": 2.0,
    }
    # A list of tools is keyed by their names; a config that never named tools (an older
    # server) leaves them to the server.
    listed = rft.JobConfig.model_validate({"tools": [multiply, fetch_length]})
    assert list(listed.tools) == ["multiply", "fetch_length"]
    assert "tools" not in rft.JobConfig().to_update_request()
    with pytest.raises(rft.AgentSourceError, match="a tool's name is its function's"):
        config.tools["times"] = multiply


def test_the_job_file_names_tools_and_an_environment_by_file(code_files: Path) -> None:
    job_file = code_files / "job.yaml"
    job_file.write_text(
        yaml.safe_dump(
            {
                "dataset_id": "ds_1",
                "reward_functions": {"f": {"source": "def f(p, c, e):\n    return 1.0\n"}},
                "tools": [{"file": "tools.py", "name": "square_root"}],
                "environment": {"file": "counter.py", "class_name": "Counter", "weight": 0.5},
                "hyperparameters": {"max_turns": 3},
            }
        )
    )
    spec = read_job_spec(job_file)
    assert spec["tools"] == [rft.Tool(name="square_root", source=TOOLS_FILE)]
    assert spec["environment"] == rft.Environment(
        source=ENVIRONMENT_FILE, class_name="Counter", weight=0.5
    )
    job_file.write_text(
        yaml.safe_dump(
            {
                "dataset_id": "ds_1",
                "reward_functions": {"f": {"source": "def f(p, c, e):\n    return 1.0\n"}},
                "tools": [{"file": "tools.py", "name": "cube"}],
            }
        )
    )
    with pytest.raises(rft.RFTError, match="no top-level function 'cube'"):
        read_job_spec(job_file)


def test_config_yaml_round_trips_tools_and_environments(code_files: Path) -> None:
    config = rft.JobConfig.model_validate(
        {
            "version": 1,
            "reward_functions": {},
            "tools": {"square_root": {"source": TOOLS_FILE, "version": 1}},
            "environments": {"counter": {"source": ENVIRONMENT_FILE, "class_name": "Counter"}},
        }
    )
    config_file = code_files / "config.yaml"
    config_file.write_text(config_to_yaml(config))
    read_back = read_config(config_file)
    assert read_back.to_update_request()["tools"] == {"square_root": {"source": TOOLS_FILE}}
    assert read_back.environments["counter"].class_name == "Counter"


def test_trajectory_lines_read_turn_by_turn() -> None:
    completion = rft.Completion.model_validate(COMPLETION)
    assert completion.trajectory is not None
    assert trajectory_lines(completion.trajectory) == [
        "assistant: Let me compute.",
        "  -> multiply(a=6, b=7)",
        "  <- 42",
        '  -> fetch_length(url="x")',
        "  !! fetch_length timeout: ran past 30 s",
        "assistant: It is 42.",
        "[truncated: the rollout was cut off here]",
    ]


def test_completions_show_prints_the_trajectory(
    server: RecordingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def mocked_client(**settings: Any) -> rft.Client:
        http_client = httpx.Client(transport=httpx.MockTransport(server))
        return rft.Client(api_key="k", base_url="http://rft.test", http_client=http_client)

    monkeypatch.setattr(cli_context, "Client", mocked_client)
    result = CliRunner().invoke(
        cli_app.app,
        ["completions", "show", "job_1", "--step", "2", "--count", "1"],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    for line in ("assistant: Let me compute.", "-> multiply(a=6, b=7)", "<- 42"):
        assert line in result.output
    assert "!! fetch_length timeout: ran past 30 s" in result.output


def test_the_server_takes_the_tools_and_environment_the_sdk_sends(
    rft_client: rft.Client, dataset: rft.Dataset, code_files: Path
) -> None:
    """The real edge: the stack stores what the SDK sent and takes the config back."""
    job = rft_client.jobs.create(
        dataset=dataset,
        tools=[multiply, rft.Tool.from_file(code_files / "tools.py", "square_root")],
        # Scored by the environment's get_reward alone: no reward functions.
        environment=rft.Environment.from_file(code_files / "counter.py", "Counter", weight=0.5),
        hyperparameters={**TINY_HYPERPARAMETERS, "max_turns": 3, "tool_timeout_s": 5.0},
    )
    try:
        assert (job.hyperparameters["max_turns"], job.hyperparameters["tool_timeout_s"]) == (3, 5.0)
        config = rft_client.jobs.get_config(job.id)
        assert config.tools["multiply"].source == rft.Tool.from_function(multiply).source
        assert config.tools["square_root"].label == "square_root_v1"
        # The shorthand's environment is named after its class.
        assert config.environments["Counter"].weight == 0.5
        config.environments["Counter"] = rft.Environment.from_file(
            code_files / "counter.py", "Counter", weight=2.0
        )
        update = rft_client.jobs.update_config(job.id, config)
        assert update.config.environments["Counter"].weight == 2.0
        assert set(update.config.tools) == {"multiply", "square_root"}
    finally:
        rft_client.jobs.cancel(job.id)
