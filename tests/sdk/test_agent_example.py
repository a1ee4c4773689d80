"""examples/agent_lookup.py end to end, as a user would run it: through the SDK, an agent job
on the tool-calling tiny model trains and the example prints its steps and a rollout.

That this job's reward rises is shown once, where it is cheapest and exact:
tests/training/test_agent_training.py::test_grpo_raises_a_tool_using_reward (the same model,
tool, reward and hyperparameters, 16 steps, without a stack). Here the example runs 4 steps."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from transformers.utils import get_json_schema

from service.base_models.built_in.tiny_tool_model import LOOKUP_TABLE, lookup_tool_schema
from service.stack import LocalStack

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_lookup.py"
STEPS = 4


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("agent_lookup_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_asks_what_the_model_was_warmed_up_on() -> None:
    """The tiny model learned one tool schema and one table: the example must show it those."""
    example = load_example()
    assert get_json_schema(example.lookup) == lookup_tool_schema()
    assert {key: example.lookup(key) for key in LOOKUP_TABLE} == LOOKUP_TABLE


def test_the_agent_example_runs_and_prints_its_steps_and_a_rollout(
    stack: LocalStack, api_key: str
) -> None:
    env = {**os.environ, "RFT_BASE_URL": stack.base_url, "RFT_API_KEY": api_key}
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--steps", str(STEPS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = result.stdout
    assert result.returncode == 0, output + result.stderr
    assert ": succeeded" in output, output
    steps = re.findall(r"step +\d+ +reward ([\d.]+) +tool calls/rollout ([\d.]+)", output)
    assert len(steps) == STEPS, output
    assert all(0.0 <= float(reward) <= 1.0 for reward, _ in steps), output
    assert re.search(r"first 4 steps [\d.]+, last 4 steps [\d.]+", output), output
    assert "  assistant: " in output, output
