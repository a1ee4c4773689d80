"""examples/agent_lookup.py end to end, as a user would run it: through the SDK, an agent job
on the tool-calling tiny model raises a reward only its tool can earn."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from transformers.utils import get_json_schema

from service.stack import LocalStack
from workers.training.tiny_tool_model import LOOKUP_TABLE, lookup_tool_schema

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_lookup.py"


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


def test_agent_example_runs_and_the_reward_rises(stack: LocalStack, api_key: str) -> None:
    env = {**os.environ, "RFT_BASE_URL": stack.base_url, "RFT_API_KEY": api_key}
    result = subprocess.run(
        [sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True, timeout=900
    )
    output = result.stdout
    assert result.returncode == 0, output + result.stderr
    assert ": succeeded" in output, output
    steps = re.findall(r"step +\d+ +reward ([\d.]+) +tool calls/rollout ([\d.]+)", output)
    assert len(steps) == 16, output
    first, last = re.search(r"first 4 steps ([\d.]+), last 4 steps ([\d.]+)", output).groups()  # type: ignore[union-attr]
    # Measured (tests/training/test_agent_training.py): ~0.45 at the start, 0.85-0.95 by step 6.
    assert float(last) > float(first) + 0.2, output
    assert "  assistant: " in output, output
