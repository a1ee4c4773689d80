"""The built-in tool-calling model: TRL accepts it, it renders exactly like GRPO will (and like
an SFT row of the same conversation), its warm-up makes it call its tool sometimes, not always
(so GRPO has something to improve), and after a call it answers with the tool's result, not
with a memorised value."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import get_json_schema
from trl.chat_template_utils import (
    add_response_schema,
    is_chat_template_prefix_preserving,
    parse_response,
    supports_tool_calling,
)

from sandbox.api import RewardForm
from sandbox.inspection import find_reward_entry_point
from service.base_models.built_in import tiny_tool_model
from service.base_models.built_in.model_building import directory_digest
from service.base_models.built_in.tiny_model import resolve_base_model
from service.base_models.built_in.tiny_tool_model import (
    LOOKUP_REWARD_SOURCE,
    LOOKUP_TABLE,
    LOOKUP_TOOL_SOURCE,
    TINY_TOOL_MODEL_NAME,
    TranscriptRenderer,
    WarmUpTool,
    answer_text,
    ensure_tiny_tool_model,
    lookup_dataset,
    lookup_tool,
    lookup_tool_schema,
    tool_call_text,
)
from service.datasets.supervised import sft_examples
from tests.conftest import built_in_models_reused
from workers.training.sft import trained_examples


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The model an earlier session built and kept (tests/conftest.py), in a cache of its own
    (the shared model cache is checked to hold rft-tiny alone); built here only when none was
    kept."""
    started = time.perf_counter()
    with built_in_models_reused(tmp_path_factory.mktemp("tool-models")) as cache:
        path = ensure_tiny_tool_model(cache)
        print(f"{TINY_TOOL_MODEL_NAME} ready in {time.perf_counter() - started:.1f} s")
        yield path


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Any:
    return add_response_schema(AutoTokenizer.from_pretrained(model_dir))


# Two builds of the recipe with its warm-up cut short, one in another process with another
# hash seed (as another session would build it): every step of the warm-up is the same code,
# so a short one shows what a full one would (the full build: ~45-90 s of CPU on 2 cores).
SHORT_BUILD = """
import sys
from pathlib import Path
from service.base_models.built_in import tiny_tool_model
tiny_tool_model._WARMUP_STEPS = int(sys.argv[2])
print(tiny_tool_model.ensure_tiny_tool_model(Path(sys.argv[1])))
"""
SHORT_WARM_UP_STEPS = 12


def test_builds_byte_identical_models(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keeping a built model across sessions (keyed by the builders and pins) relies on a build
    in another process matching byte for byte."""
    monkeypatch.setattr(tiny_tool_model, "_WARMUP_STEPS", SHORT_WARM_UP_STEPS)
    here = ensure_tiny_tool_model(tmp_path / "here")
    elsewhere = subprocess.run(
        [sys.executable, "-c", SHORT_BUILD, str(tmp_path / "elsewhere"), str(SHORT_WARM_UP_STEPS)],
        env={**os.environ, "PYTHONHASHSEED": "12345"},
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    again = Path(elsewhere.stdout.strip().splitlines()[-1])
    assert again != here and again.is_dir()
    assert directory_digest(again) == directory_digest(here)
    monkeypatch.undo()
    assert ensure_tiny_tool_model(model_dir.parent) == model_dir  # reused, not rebuilt
    assert resolve_base_model(TINY_TOOL_MODEL_NAME, model_dir.parent) == str(model_dir)


def test_trl_accepts_it_for_tool_calling(model_dir: Path, tokenizer: Any) -> None:
    plain = AutoTokenizer.from_pretrained(model_dir)
    assert supports_tool_calling(plain)
    assert is_chat_template_prefix_preserving(plain)
    assert tokenizer.eos_token == "<|im_end|>"
    # The markers are whole tokens that decoding without special tokens keeps, as in Qwen2.5.
    assert len(tokenizer.encode("<tool_call>", add_special_tokens=False)) == 1
    assert "<tool_call>" in tokenizer.decode(
        tokenizer.encode(tool_call_text("beta"), add_special_tokens=False),
        skip_special_tokens=True,
    )

    renderer = TranscriptRenderer(tokenizer)
    prompt = renderer.prompt_ids([{"role": "user", "content": "What is the value of beta?"}])
    # The warm-up saw the schema transformers derives from the tool's signature and docstring.
    assert json.dumps(lookup_tool_schema()) in tokenizer.decode(prompt)
    call = tokenizer.encode(tool_call_text("beta"), add_special_tokens=False)
    parsed = parse_response(tokenizer, call, prefix=prompt, tools=[lookup_tool()])
    assert parsed["tool_calls"] == [
        {"type": "function", "function": {"name": "lookup", "arguments": {"key": "beta"}}}
    ]


def test_warm_up_transcripts_render_like_the_chat_history(tokenizer: Any) -> None:
    # GRPO concatenates prompt, generated ids and the template's tool suffix; the same
    # conversation rendered as one chat history must give the same tokens.
    row = {"prompt": [{"role": "user", "content": "Look up gamma."}], "key": "gamma"}
    ids, mask = TranscriptRenderer(tokenizer).transcript(row, calls=True, guess="cat")
    call = {"type": "function", "function": {"name": "lookup", "arguments": {"key": "gamma"}}}
    history = [
        *row["prompt"],
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "lookup", "content": "plum"},
    ]
    rendered = tokenizer.apply_chat_template(
        history, tools=[lookup_tool()], add_generation_prompt=True, tokenize=False
    )
    text = rendered + answer_text("gamma", "plum")
    assert ids == tokenizer.encode(text, add_special_tokens=False)
    written = tokenizer.decode([t for t, learned in zip(ids, mask, strict=True) if learned])
    assert written == tool_call_text("gamma") + answer_text("gamma", "plum")


def test_an_sft_row_of_the_conversation_renders_the_same_tokens(tokenizer: Any) -> None:
    """The user's path: an SFT job on transcripts of a tool, then GRPO with that tool. TRL's
    SFTTrainer renders a row with the chat template and the row's ``tools``; GRPO's rollouts
    must be the same tokens."""
    tool = WarmUpTool("search", "query")
    row = {"prompt": [{"role": "user", "content": "Look up gamma."}], "key": "gamma"}
    ids, _ = TranscriptRenderer(tokenizer).transcript(
        row, calls=True, guess="cat", tool=tool, result="violet"
    )
    call = {"type": "function", "function": {"name": "search", "arguments": {"query": "gamma"}}}
    sft_row = {
        "prompt": row["prompt"],
        "completion": [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "name": "search", "content": "violet"},
            {"role": "assistant", "content": answer_text("gamma", "violet")[: -len("<|im_end|>")]},
        ],
        "tools": [get_json_schema(tool.function())],
    }
    [example] = sft_examples([sft_row])
    rendered = tokenizer.apply_chat_template(
        example["prompt"] + example["completion"],
        tools=json.loads(example["tools"]),
        tokenize=True,
        return_dict=False,
    )
    # The template ends the last turn with a newline GRPO never generates (it stops at eos).
    assert list(rendered) == ids + tokenizer.encode("\n", add_special_tokens=False)
    # The SFT job learns the assistant's turns only, as GRPO's loss sees them (not the tool's
    # result, which only the tool can know).
    [trained] = trained_examples([example], tokenizer)
    assert trained["input_ids"] == list(rendered)
    learned = [token for token in trained["labels"] if token != -100]
    assert tokenizer.decode(learned) == (
        tool_call_text("gamma", tool) + "\n" + answer_text("gamma", "violet") + "\n"
    )


def test_answers_with_the_tool_s_result_not_a_memorised_value(
    model_dir: Path, tokenizer: Any
) -> None:
    """A user's own table (the example's keys, each with another key's value): after a call,
    the answer names what the tool returned, not the value the example table stores."""
    model: Any = AutoModelForCausalLM.from_pretrained(model_dir)
    renderer = TranscriptRenderer(tokenizer)
    keys = sorted(LOOKUP_TABLE)
    values = [LOOKUP_TABLE[key] for key in keys]
    table = dict(zip(keys, values[3:] + values[:3], strict=True))
    assert not [key for key in keys if table[key] == LOOKUP_TABLE[key]]
    torch.manual_seed(0)
    from_tool = recited = 0
    for row in lookup_dataset(32, seed=2):
        prompt = renderer.prompt_ids(row["prompt"])
        call = tokenizer.encode(tool_call_text(row["key"]), add_special_tokens=False)
        context = prompt + call + renderer.tool_suffix_ids(table[row["key"]])
        final = tokenizer.decode(_sample(model, context, max_new_tokens=24))
        from_tool += f" {table[row['key']]}." in final
        recited += f" {LOOKUP_TABLE[row['key']]}." in final
    print(f"answers naming the tool's result: {from_tool}/32, the example table's: {recited}/32")
    # Measured (docs/agents.md, sampled calls): 0.11 before randomised tables, 1.00 after.
    assert from_tool >= 24, (from_tool, recited)
    assert recited <= 4, (from_tool, recited)


def test_calls_lookup_sometimes_and_then_answers_right(model_dir: Path, tokenizer: Any) -> None:
    model: Any = AutoModelForCausalLM.from_pretrained(model_dir)
    renderer = TranscriptRenderer(tokenizer)
    reward = _reward_function()
    torch.manual_seed(0)
    calling_rewards, direct_rewards = [], []
    for row in lookup_dataset(32, seed=1):
        prompt = renderer.prompt_ids(row["prompt"])
        first = _sample(model, prompt, max_new_tokens=40)
        parsed = parse_response(tokenizer, first, prefix=prompt, tools=[renderer.tool])
        calls = parsed.get("tool_calls") or []
        right_call = [c["function"] for c in calls] == [
            {"name": "lookup", "arguments": {"key": row["key"]}}
        ]
        if right_call:
            context = prompt + first + renderer.tool_suffix_ids(renderer.tool(row["key"]))
            final = tokenizer.decode(_sample(model, context, max_new_tokens=24))
            calling_rewards.append(reward(row["prompt"], final, row))
        else:
            direct_rewards.append(reward(row["prompt"], parsed["content"], row))
    call_rate = len(calling_rewards) / 32
    print(
        f"right lookup calls: {call_rate:.2f}; reward after a call: "
        f"{sum(calling_rewards) / max(1, len(calling_rewards)):.2f}, without: "
        f"{sum(direct_rewards) / max(1, len(direct_rewards)):.2f}"
    )
    # Sometimes, not always: GRPO can raise the call rate (measured 0.39 over 128 samples).
    assert 0.15 <= call_rate <= 0.85
    # Calling pays: the answer after the tool response names the value, a guess rarely does.
    assert sum(calling_rewards) / len(calling_rewards) >= 0.8
    assert sum(direct_rewards) / len(direct_rewards) <= 0.35


def test_lookup_tool_and_reward_sources() -> None:
    namespace: dict[str, Any] = {}
    exec(LOOKUP_TOOL_SOURCE, namespace)  # self-contained: nothing but the source
    assert namespace["lookup"]("gamma") == LOOKUP_TABLE["gamma"]
    assert "no value" in namespace["lookup"]("nope")

    entry = find_reward_entry_point("correct_value", LOOKUP_REWARD_SOURCE)
    assert entry.form == RewardForm.SAMPLE
    reward = _reward_function()
    row = lookup_dataset(1, seed=3)[0]
    assert row["answer"] == LOOKUP_TABLE[row["key"]]
    assert row["prompt"][0]["role"] == "user" and row["key"] in row["prompt"][0]["content"]
    good = answer_text(row["key"], row["answer"]).removesuffix("<|im_end|>")
    assert reward(row["prompt"], good, row) == 1.0
    assert reward(row["prompt"], [{"role": "assistant", "content": good}], row) == 1.0
    assert reward(row["prompt"], "I do not know.", row) == 0.0
    assert reward(row["prompt"], good.replace(row["answer"], row["answer"] + "s"), row) == 0.0
    # A substring of another word never counts: no value hides in another value or a key.
    words = set(LOOKUP_TABLE) | set(LOOKUP_TABLE.values())
    assert not [(v, w) for v in LOOKUP_TABLE.values() for w in words if v != w and v in w]
    assert lookup_dataset(8, seed=5) == lookup_dataset(8, seed=5)


def _reward_function() -> Any:
    namespace: dict[str, Any] = {}
    exec(LOOKUP_REWARD_SOURCE, namespace)
    return namespace["correct_value"]


def _sample(model: Any, ids: list[int], *, max_new_tokens: int) -> list[int]:
    output = model.generate(
        torch.tensor([ids]),
        max_new_tokens=max_new_tokens,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
    )
    return list(output[0][len(ids) :].tolist())
