"""Python functions into reward source: what is accepted, and the errors for what is not."""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

import rft
from rft.models import RewardFunctionMap


def length_score(prompt, completion, example):  # type: ignore[no-untyped-def]
    # A comment inside the body travels with it.
    return min(len(completion), 20) / 20


def uses_module_import(prompt: str, completion: str, example: dict) -> float:
    return float(bool(re.search("a", completion)))


def imports_inside(prompt: str, completion: str, example: dict) -> float:
    import re

    return float(bool(re.search("a", completion)))


def counting(prompt: str, completion: str, example: dict) -> float:
    return sum(1 for ch in completion if ch in "aeiou") / max(1, len(completion))


def passthrough(function: Callable[..., Any]) -> Callable[..., Any]:
    return function


@passthrough
def decorated(prompt: str, completion: str, example: dict) -> float:
    return 1.0


class Scorer:
    def score(self, prompt: str, completion: str, example: dict) -> float:
        return 1.0


def make_closure(target: str) -> Callable[..., float]:
    def matches(prompt: str, completion: str, example: dict) -> float:
        return float(target in completion)

    return matches


def run(source: str, name: str) -> Callable[..., Any]:
    namespace: dict[str, Any] = {}
    exec(compile(source, name, "exec"), namespace)
    return namespace[name]


def test_a_plain_function_becomes_its_own_source() -> None:
    source = rft.function_source(length_score)
    assert source.startswith("def length_score(prompt, completion, example):")
    assert "A comment inside the body" in source
    assert run(source, "length_score")("p", "x" * 10, {}) == 0.5


def test_nested_function_without_closure_is_dedented() -> None:
    def nested(prompt: str, completion: str, example: dict) -> float:
        return 2.0

    source = rft.function_source(nested)
    assert source.startswith("def nested(")
    assert run(source, "nested")("p", "c", {}) == 2.0


def test_imports_inside_the_body_and_generators_are_fine() -> None:
    assert run(rft.function_source(imports_inside), "imports_inside")("p", "banana", {}) == 1.0
    assert run(rft.function_source(counting), "counting")("p", "aa", {}) == 1.0


def test_decorators_are_dropped() -> None:
    source = rft.function_source(decorated)
    assert source.startswith("def decorated(")
    assert "@passthrough" not in source


@pytest.mark.parametrize(
    ("function", "message"),
    [
        (lambda prompt, completion, example: 1.0, "is a lambda"),
        (make_closure("cat"), "closure over target"),
        (Scorer().score, "bound method"),
        (len, "not a Python function"),
        (functools.partial(length_score, "p"), "not a Python function"),
        (uses_module_import, "module-level names re"),
    ],
    ids=["lambda", "closure", "bound-method", "builtin", "partial", "module-global"],
)
def test_functions_that_cannot_travel_are_refused_clearly(
    function: Callable[..., Any], message: str
) -> None:
    with pytest.raises(rft.RewardFunctionSourceError, match=message) as caught:
        rft.function_source(function, name="fmt")
    assert "'fmt'" in str(caught.value)


def test_functions_typed_into_a_repl_say_so() -> None:
    code = (
        "import rft\n"
        "exec('def typed(prompt, completion, example):\\n    return 1.0\\n')\n"
        "try:\n"
        "    rft.function_source(typed)\n"
        "except rft.RewardFunctionSourceError as error:\n"
        "    print(error)\n"
    )
    output = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "not available" in output and "interactive interpreter" in output


def test_config_assignment_converts_and_keeps_the_weight() -> None:
    config = rft.JobConfig.model_validate(
        {
            "job_id": "job_x",
            "version": 4,
            "reward_functions": {"fmt": {"source": "def fmt(p, c, e): return 0", "weight": 0.3}},
        }
    )
    config.reward_functions["fmt"] = length_score
    config.reward_functions["extra"] = "def extra(p, c, e):\n    return 1.0\n"
    assert isinstance(config.reward_functions, RewardFunctionMap)
    assert config.reward_functions["fmt"].weight == 0.3
    assert config.reward_functions["fmt"].source.startswith("def length_score(")
    assert config.to_update_request()["reward_functions"]["extra"] == {
        "source": "def extra(p, c, e):\n    return 1.0\n",
        "weight": 1.0,
    }
    with pytest.raises(rft.RewardFunctionSourceError):
        config.reward_functions["bad"] = make_closure("x")


def test_reward_function_takes_a_function_or_source() -> None:
    assert rft.RewardFunction(length_score, weight=2).source == rft.function_source(length_score)
    assert rft.RewardFunction("def f(p, c, e): return 1", weight=0.5).weight == 0.5
