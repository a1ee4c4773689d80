"""The agent examples, as a user would run them through the SDK.

examples/agent_own_tool.py is the path a user takes with a small model and a tool of their own
(`get_word`, not the `lookup` the tiny model was warmed up on): an SFT job on transcripts of the
tool, then a GRPO agent job `init_from` it. It runs here end to end on the session's stack
(the one test of this module that trains): by its last steps most answers name what the tool
returned, and the reward has risen.

examples/agent_lookup.py (GRPO alone on the warm-up's own task) is checked for what it shows
the model; that its reward rises is shown where it is cheapest and exact:
tests/training/test_agent_training.py::test_grpo_raises_a_tool_using_reward."""

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

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"{name}_example", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_lookup_example_asks_what_the_model_was_warmed_up_on() -> None:
    """The example task's schema and table, as the warm-up renders them."""
    example = load_example("agent_lookup")
    assert get_json_schema(example.lookup) == lookup_tool_schema()
    assert {key: example.lookup(key) for key in LOOKUP_TABLE} == LOOKUP_TABLE


def test_the_own_tool_example_s_transcripts_show_the_tool_as_the_agent_job_will() -> None:
    """The SFT rows' `tools` is the schema GRPO renders from the tool itself: the warm-up's
    prompts are the agent job's, token for token."""
    example = load_example("agent_own_tool")
    assert get_json_schema(example.get_word) == example.GET_WORD_SCHEMA
    assert example.get_word("beta") == "frog"
    assert example.correct_word([], example.answer("beta", "frog"), {"answer": "frog"}) == 1.0
    assert example.correct_word([], example.answer("beta", "frogs"), {"answer": "frog"}) == 0.0


def test_the_own_tool_example_trains_an_agent_that_answers_from_the_tool(
    stack: LocalStack, api_key: str
) -> None:
    """The example's defaults (its SFT and GRPO lengths, seeded), through the SDK: both jobs
    succeed, the share of answers naming the tool's result is a clear majority in the last
    quarter of the steps, and the reward of the last quarter is above the first's."""
    env = {**os.environ, "RFT_BASE_URL": stack.base_url, "RFT_API_KEY": api_key}
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "agent_own_tool.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    output = result.stdout
    print(output)  # the example's own report (pytest -s)
    assert result.returncode == 0, output + result.stderr
    assert re.search(r"\(sft\): succeeded, loss [\d.]+ -> [\d.]+", output), output
    assert re.search(r"job_\w+: succeeded", output), output
    example = load_example("agent_own_tool")
    steps = re.findall(r"step +\d+ +reward ([\d.]+) +answers from the tool ([\d.]+)", output)
    assert len(steps) == example.TRAIN_STEPS, output
    rewards = re.search(r"first \d+ steps ([\d.]+), last \d+ steps ([\d.]+)", output)
    assert rewards is not None, output
    assert float(rewards[2]) > float(rewards[1]), output
    from_tool = re.search(r"answers equal to the tool's result, last \d+ steps: ([\d.]+)", output)
    assert from_tool is not None and float(from_tool[1]) >= 0.6, output
    assert "  -> get_word(" in output, output  # a call of the last step's rollout, as it was made
