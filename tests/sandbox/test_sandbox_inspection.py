"""Static inspection of reward source: which function is called, and in which form."""

from __future__ import annotations

import pytest

from sandbox.api import RewardCodeError, RewardForm
from sandbox.inspection import find_reward_entry_point, inspect_reward_source


@pytest.mark.parametrize(
    ("source", "form"),
    [
        ("def r(prompt, completion, example):\n    return 1.0\n", RewardForm.SAMPLE),
        ("def r(p, c, row):\n    return 1.0\n", RewardForm.SAMPLE),
        ("def r(p, c, row=None):\n    return 1.0\n", RewardForm.SAMPLE),
        ("def r(p, c, e, *, scale=2):\n    return 1.0\n", RewardForm.SAMPLE),
        # Agent jobs: the rollout's conversation, by name.
        ("def r(p, c, e, messages):\n    return 1.0\n", RewardForm.SAMPLE),
        ("def r(p, c, e, messages=None):\n    return 1.0\n", RewardForm.SAMPLE),
        ("def r(p, c, e, *, messages):\n    return 1.0\n", RewardForm.SAMPLE),
        ("def r(prompts, completions, **kwargs):\n    return []\n", RewardForm.BATCH),
        ("def r(completions, **kwargs):\n    return []\n", RewardForm.BATCH),
        ("def r(prompts, completions, answer):\n    return []\n", RewardForm.BATCH),
        ("def r(**kwargs):\n    return []\n", RewardForm.BATCH),
        ("def r(x, **kwargs):\n    return []\n", RewardForm.BATCH),
    ],
)
def test_form_follows_the_signature(source: str, form: RewardForm) -> None:
    assert inspect_reward_source("r", source) == form


def test_the_def_named_like_the_function_wins() -> None:
    source = (
        "def helper(a, b, c):\n    return 0\n\n"
        "def accuracy(prompts, completions, **kw):\n    return []\n\n"
        "def other(a, b, c):\n    return 0\n"
    )
    entry = find_reward_entry_point("accuracy", source)
    assert (entry.function_name, entry.form, entry.line) == ("accuracy", RewardForm.BATCH, 4)


def test_the_only_def_is_used_whatever_its_name() -> None:
    entry = find_reward_entry_point("length", "import re\n\ndef score(p, c, e):\n    return 1\n")
    assert entry.function_name == "score"


def test_the_last_def_is_used_when_none_matches() -> None:
    source = "def first(a, b, c):\n    return 0\n\ndef last(prompts, **kw):\n    return []\n"
    assert find_reward_entry_point("reward", source).function_name == "last"


def test_nested_and_method_defs_are_not_candidates() -> None:
    source = "class A:\n    def m(self, a, b):\n        pass\n"
    with pytest.raises(RewardCodeError, match="no top-level function"):
        inspect_reward_source("r", source)


def test_syntax_error_names_the_line() -> None:
    with pytest.raises(RewardCodeError, match="line 3") as caught:
        inspect_reward_source("r", "import re\n\ndef r(p, c, e)\n    return 1\n")
    assert caught.value.function_name == "r"


def test_async_functions_take_both_forms() -> None:
    assert inspect_reward_source("r", "async def r(p, c, e):\n    return 1\n") == RewardForm.SAMPLE
    batch = "async def r(prompts, completions, **kwargs):\n    return []\n"
    assert inspect_reward_source("r", batch) == RewardForm.BATCH


@pytest.mark.parametrize(
    "source",
    [
        "def r(completion):\n    return 1\n",
        "def r(p, c):\n    return 1\n",
        "def r(p, c, e, extra):\n    return 1\n",
        "def r(p, c, e, *, required):\n    return 1\n",
        "def r(p, c, e, messages, extra):\n    return 1\n",
    ],
)
def test_other_signatures_name_the_two_accepted_ones(source: str) -> None:
    with pytest.raises(RewardCodeError) as caught:
        inspect_reward_source("r", source)
    assert "f(prompt, completion, example)" in caught.value.message
    assert "f(prompts, completions, **kwargs)" in caught.value.message


def test_inspection_never_runs_the_code(tmp_path: object) -> None:
    source = "raise SystemExit('ran')\n\ndef r(p, c, e):\n    return 1\n"
    assert inspect_reward_source("r", source) == RewardForm.SAMPLE
