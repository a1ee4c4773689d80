"""A tiny causal LM that calls a tool, built offline, so GRPO with tools runs on a CPU.

``rft-tiny-tools`` knows one task: a user asks for the value stored under a key, and the
model may call a one-argument lookup tool before answering "The value of <key> is <value>.".
Its tokenizer carries TRL's Qwen2.5 chat template verbatim, which is what lets
``GRPOTrainer(tools=...)`` parse its tool calls.

A random model never writes a parseable tool call, so the build ends with a short supervised
warm-up on transcripts rendered token for token the way GRPO renders them. Two things in those
transcripts make the model *use* its tool rather than recite a table:

- **randomised tables**: the value a transcript's tool returns is drawn at random for each
  transcript, so no key has a value to memorise: copying the tool's result into the answer is
  the only way the warm-up's answers can be predicted;
- **several tools**: each transcript offers one of :data:`WARM_UP_TOOLS` (``lookup``,
  ``get_value``, ``search``, with an argument ``key``, ``name`` or ``query``), so the call is
  written from the schema in the system prompt, not from one memorised name.

Only some first turns call the tool; the others answer at once with a guessed value. The warmed
model therefore calls the tool sometimes, not always, and a reward for the right answer
(:data:`LOOKUP_REWARD_SOURCE`) has something to improve: calling more often.
:data:`LOOKUP_TABLE` and :data:`LOOKUP_TOOL_SOURCE` are the example task's table and tool.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.base_models.built_in.model_building import (
    IM_END,
    PAD,
    TINY_QWEN2_SHAPE,
    build_bpe_tokenizer,
    ensure_built,
    random_qwen2,
)

TINY_TOOL_MODEL_NAME = "rft-tiny-tools"

# Bump when anything below changes what gets built (the table, the phrasing, the warm-up): the
# cache directory is named after it, so old builds are ignored.
_RECIPE_VERSION = 2
_SEED = 11

# Qwen's tool-call markers: whole tokens, but not special ones, exactly as in Qwen2.5's tokenizer
# (decoding with skip_special_tokens keeps them, so a parser of decoded text still sees them).
TOOL_MARKERS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")

LOOKUP_TABLE: dict[str, str] = {
    "alpha": "apple",
    "beta": "cat",
    "gamma": "plum",
    "delta": "owl",
    "kappa": "fig",
    "sigma": "bee",
    "omega": "moon",
    "theta": "rain",
    "lambda": "snow",
    "iota": "star",
    "zeta": "lime",
    "rho": "wolf",
}

# What the warm-up's randomised tables are drawn from: the example table's keys and values and
# as many again. Every value is a whole word no other key or value contains.
WARM_UP_KEYS: tuple[str, ...] = (
    *LOOKUP_TABLE,
    *("eta", "epsilon", "mu", "nu", "xi", "pi", "tau", "phi", "chi", "psi", "upsilon", "omicron"),
)
WARM_UP_VALUES: tuple[str, ...] = (
    *LOOKUP_TABLE.values(),
    *("oak", "sun", "tea", "pear", "frog", "dust", "gold", "leaf", "milk", "salt", "wind", "corn"),
)

_QUESTIONS = (
    "What is the value of {key}?",
    "What value is stored under {key}?",
    "Look up {key}.",
    "Tell me the value of {key}.",
    "Which value does {key} have?",
)
_ANSWER = "The value of {key} is {value}."


@dataclass(frozen=True)
class WarmUpTool:
    """One of the warm-up's tools: a function ``name(argument: str) -> str`` over a table."""

    name: str = "lookup"
    argument: str = "key"

    def source(self, table: dict[str, str]) -> str:
        """The tool's Python source, self-contained (the table is inside the function): it
        needs nothing but the standard library, and never raises: an unknown key gets an
        explanation back."""
        return f'''def {self.name}({self.argument}: str) -> str:
    """Look up the value stored under a {self.argument}.

    Args:
        {self.argument}: The {self.argument} to look up.
    """
    table = {table!r}
    return table.get({self.argument}, "no value is stored under " + repr({self.argument}))
'''

    def function(self, table: dict[str, str] | None = None) -> Callable[[str], str]:
        """The tool as a function (its schema does not depend on the table)."""
        namespace: dict[str, Any] = {}
        code = self.source(LOOKUP_TABLE if table is None else table)
        exec(compile(code, f"<{self.name} tool>", "exec"), namespace)
        function: Callable[[str], str] = namespace[self.name]
        return function


LOOKUP = WarmUpTool()
WARM_UP_TOOLS: tuple[WarmUpTool, ...] = tuple(
    WarmUpTool(name, argument)
    for name in ("lookup", "get_value", "search")
    for argument in ("key", "name", "query")
)

LOOKUP_TOOL_SOURCE = LOOKUP.source(LOOKUP_TABLE)
"""The example task's ``lookup`` tool over :data:`LOOKUP_TABLE`."""

LOOKUP_REWARD_SOURCE = '''import re


def correct_value(prompt, completion, example):
    """1.0 when the final answer names the value stored under the example's key, else 0.0.

    ``completion`` is the final assistant message's text; given a list of chat messages
    instead, the content of the last assistant message is read. The value must appear as a
    whole word ("fig" counts in "It is fig.", not in "figure").
    """
    if isinstance(completion, list):
        replies = [m.get("content") or "" for m in completion if m.get("role") == "assistant"]
        completion = replies[-1] if replies else ""
    pattern = r"\\b" + re.escape(str(example["answer"])) + r"\\b"
    return 1.0 if re.search(pattern, str(completion)) else 0.0
'''
"""A per-sample reward for :func:`lookup_dataset` rows: the answer names the stored value."""

# The share of warm-up transcripts whose first turn calls the tool; the rest guess. The warmed
# model calls about this often at temperature 1 (tests/training/test_tiny_tool_model.py measures).
_CALL_SHARE = 0.4
_WARMUP_TRANSCRIPTS = 2048
_WARMUP_STEPS = 900
_WARMUP_BATCH = 16
_WARMUP_LEARNING_RATE = 3e-3


def tiny_tool_model_dir(cache_dir: Path) -> Path:
    return Path(cache_dir) / f"{TINY_TOOL_MODEL_NAME}-v{_RECIPE_VERSION}"


def ensure_tiny_tool_model(cache_dir: Path) -> Path:
    """Build the tool-calling tiny model under ``cache_dir`` unless it is already there; return
    its directory (built once, under a lock, landing with one rename, like ``rft-tiny``)."""
    return ensure_built(tiny_tool_model_dir(cache_dir), _build)


def lookup_dataset(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` conversational rows asking for a key's value: ``prompt`` (one user message),
    ``key`` and ``answer`` (the value :data:`LOOKUP_TABLE` stores under the key)."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        key = rng.choice(sorted(LOOKUP_TABLE))
        question = rng.choice(_QUESTIONS).format(key=key)
        rows.append(
            {
                "prompt": [{"role": "user", "content": question}],
                "key": key,
                "answer": LOOKUP_TABLE[key],
            }
        )
    return rows


def lookup_tool() -> Any:
    """The ``lookup`` function defined by :data:`LOOKUP_TOOL_SOURCE`, to hand to
    ``GRPOTrainer(tools=[...])``: the tool schema the warm-up rendered comes from it."""
    return LOOKUP.function(LOOKUP_TABLE)


def lookup_tool_schema() -> dict[str, Any]:
    """The JSON schema transformers renders into the system prompt for the ``lookup`` tool."""
    from transformers.utils import get_json_schema

    schema: dict[str, Any] = get_json_schema(lookup_tool())
    return schema


def tool_call_text(key: str, tool: WarmUpTool = LOOKUP) -> str:
    """A first turn calling ``tool``, as the model writes it after the generation prompt: the
    Qwen2.5 template's own rendering of the call, so the history renders back identically."""
    call = json.dumps({"name": tool.name, "arguments": {tool.argument: key}})
    return f"<tool_call>\n{call}\n</tool_call>{IM_END}"


def answer_text(key: str, value: str) -> str:
    return _ANSWER.format(key=key, value=value) + IM_END


def chat_template() -> str:
    """TRL's Qwen2.5 template, verbatim: TRL recognizes tool-calling templates by exact text."""
    from trl.chat_template_utils import qwen2_5_chat_template

    template: str = qwen2_5_chat_template
    return template


def _build(out_dir: Path) -> None:
    tokenizer = build_bpe_tokenizer(
        out_dir,
        corpus=_tokenizer_corpus(),
        vocab_size=640,
        chat_template=chat_template(),
        plain_added_tokens=TOOL_MARKERS,
    )
    model = random_qwen2(
        tokenizer,
        **TINY_QWEN2_SHAPE,
        # The rendered tool schema alone is a couple of hundred tokens; room for several turns.
        max_position_embeddings=2048,
    )
    _warm_up(model, tokenizer)
    model.save_pretrained(out_dir)


def _tokenizer_corpus() -> Iterator[str]:
    """Rendered pieces of the task's conversations, so the prompt's boilerplate, the keys and
    the values become few tokens each."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    # An empty tokenizer, only to render text with the chat template the way transformers does.
    renderer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()))
    renderer.chat_template = chat_template()
    for tool in WARM_UP_TOOLS:
        for key in WARM_UP_KEYS:
            for question in _QUESTIONS:
                messages = [{"role": "user", "content": question.format(key=key)}]
                yield str(
                    renderer.apply_chat_template(
                        messages,
                        tools=[tool.function()],
                        add_generation_prompt=True,
                        tokenize=False,
                    )
                )
            yield tool_call_text(key, tool)
    for key in WARM_UP_KEYS:
        for value in WARM_UP_VALUES:
            yield f"<tool_response>\n{value}\n</tool_response>"
            yield answer_text(key, value)


class TranscriptRenderer:
    """Warm-up conversations as GRPO builds them, token for token.

    GRPO renders the prompt with the tool schema and a generation prompt, appends the tokens
    the model wrote, then the tool response formatted by the template, then the next turn's
    tokens. Prompts and tool responses are memoized: rendering one costs milliseconds, and
    thousands of transcripts share a few hundred of each.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.tool = lookup_tool()
        self._tools: dict[WarmUpTool, Any] = {}
        self._prompt_ids: dict[tuple[WarmUpTool, str], list[int]] = {}
        self._suffix_ids: dict[str, list[int]] = {}

    def transcript(
        self,
        row: dict[str, Any],
        *,
        calls: bool,
        guess: str,
        tool: WarmUpTool = LOOKUP,
        result: str | None = None,
    ) -> tuple[list[int], list[int]]:
        """The ids of one conversation for ``row``, and a mask that is 1 on the tokens the
        model writes (the loss is on those only). ``calls``: the first turn calls ``tool``
        and the final answer names what it returned (``result``, or the example table's value);
        otherwise the first turn answers at once with ``guess``."""
        prompt = self.prompt_ids(row["prompt"], tool)
        key = row["key"]
        if not calls:
            answer = self._encode(answer_text(key, guess))
            return prompt + answer, [0] * len(prompt) + [1] * len(answer)
        call = self._encode(tool_call_text(key, tool))
        if result is None:
            result = self.tool(key)
        suffix = self.tool_suffix_ids(result)
        answer = self._encode(answer_text(key, result))
        ids = prompt + call + suffix + answer
        mask = [0] * len(prompt) + [1] * len(call) + [0] * len(suffix) + [1] * len(answer)
        return ids, mask

    def prompt_ids(self, messages: list[dict[str, Any]], tool: WarmUpTool = LOOKUP) -> list[int]:
        """The prompt as ``GRPOTrainer(tools=[tool])`` tokenizes it."""
        cache_key = (tool, json.dumps(messages, sort_keys=True))
        if cache_key not in self._prompt_ids:
            if tool not in self._tools:
                self._tools[tool] = tool.function()
            self._prompt_ids[cache_key] = self._render(
                messages, tools=[self._tools[tool]], add_generation_prompt=True
            )
        return self._prompt_ids[cache_key]

    def tool_suffix_ids(self, result: str) -> list[int]:
        """The tokens between the end of a tool-calling turn and the next assistant turn,
        computed as TRL's ``GRPOTrainer._get_tool_suffix_ids`` does: render with and without
        the tool message, and cut after the last end of turn."""
        if result not in self._suffix_ids:
            calls = [{"type": "function", "function": {"name": "lookup", "arguments": {}}}]
            messages: list[dict[str, Any]] = [
                {"role": "user", "content": "dummy"},
                {"role": "assistant", "content": "", "tool_calls": calls},
            ]
            prefix = self._render(messages, add_generation_prompt=False)
            full = self._render(
                [*messages, {"role": "tool", "name": "lookup", "content": result}],
                add_generation_prompt=True,
            )
            end_of_turn = self.tokenizer.convert_tokens_to_ids(IM_END)
            last = max(i for i, token in enumerate(prefix) if token == end_of_turn)
            assert full[: last + 1] == prefix[: last + 1], "the template does not keep prefixes"
            self._suffix_ids[result] = full[last + 1 :]
        return self._suffix_ids[result]

    def shared_prompt_prefix(self, tool: WarmUpTool = LOOKUP) -> list[int]:
        """The longest start shared by every prompt offering ``tool`` rendered so far."""
        prompts = [ids for (offered, _), ids in self._prompt_ids.items() if offered == tool]
        length = min(len(ids) for ids in prompts)
        while any(ids[:length] != prompts[0][:length] for ids in prompts):
            length -= 1
        return prompts[0][:length]

    def _render(self, messages: list[dict[str, Any]], **kwargs: Any) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            messages, tokenize=True, return_dict=False, **kwargs
        )
        return list(ids)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))


def warm_up_transcripts(
    renderer: TranscriptRenderer, rng: random.Random
) -> dict[WarmUpTool, list[tuple[list[int], list[int]]]]:
    """The warm-up's transcripts, by the tool they offer. Each draws its own table: the key's
    value is a random one of :data:`WARM_UP_VALUES`, so only the tool's result predicts it."""
    transcripts: dict[WarmUpTool, list[tuple[list[int], list[int]]]] = {
        tool: [] for tool in WARM_UP_TOOLS
    }
    for _ in range(_WARMUP_TRANSCRIPTS):
        tool = rng.choice(WARM_UP_TOOLS)
        key = rng.choice(WARM_UP_KEYS)
        row = {"prompt": [{"role": "user", "content": rng.choice(_QUESTIONS).format(key=key)}]}
        transcripts[tool].append(
            renderer.transcript(
                {**row, "key": key},
                calls=rng.random() < _CALL_SHARE,
                guess=rng.choice(WARM_UP_VALUES),
                tool=tool,
                result=rng.choice(WARM_UP_VALUES),
            )
        )
    return transcripts


def _warm_up(model: Any, tokenizer: Any) -> None:
    """Supervised training on warm-up transcripts, seeded: a rebuild gives the same weights."""
    import torch

    rng = random.Random(_SEED)
    renderer = TranscriptRenderer(tokenizer)
    transcripts = warm_up_transcripts(renderer, rng)
    # A batch offers one tool, so its prompts share the system prompt (run once, below).
    prefixes = {tool: renderer.shared_prompt_prefix(tool) for tool in WARM_UP_TOOLS}
    pad = tokenizer.convert_tokens_to_ids(PAD)
    # One thread: on a busy machine two threads made each step over ten times slower (they
    # wait on each other), and the weights must not depend on the caller's thread count.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        optimizer = torch.optim.AdamW(model.parameters(), lr=_WARMUP_LEARNING_RATE)
        model.train()
        for _ in range(_WARMUP_STEPS):
            tool = rng.choice(WARM_UP_TOOLS)
            batch = [rng.choice(transcripts[tool]) for _ in range(_WARMUP_BATCH)]
            loss = _loss_after_shared_prefix(model, prefixes[tool], batch, pad)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    finally:
        torch.set_num_threads(threads)
        model.eval()


def _loss_after_shared_prefix(
    model: Any, prefix: list[int], batch: list[tuple[list[int], list[int]]], pad: int
) -> Any:
    """The language-model loss of ``batch`` (ids, loss mask) whose sequences all start with
    ``prefix``: the prefix (the system prompt with the tool schema, most of every sequence) is
    run once and its keys and values shared by the batch. The loss equals the whole sequences'
    (neither the prefix nor the user's words after it carry loss) at a third of the cost."""
    import inspect

    import torch
    from transformers import DynamicCache

    cache = DynamicCache()
    # transformers renamed ``past_key_values`` to ``cache`` during 5.x.
    cache_argument = (
        "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    )
    model.model(input_ids=torch.tensor([prefix]), use_cache=True, **{cache_argument: cache})
    cache.batch_repeat_interleave(len(batch))
    rests = [(ids[len(prefix) :], mask[len(prefix) :]) for ids, mask in batch]
    width = max(len(ids) for ids, _ in rests)
    input_ids = [ids + [pad] * (width - len(ids)) for ids, _ in rests]
    attention = [[1] * (len(prefix) + len(ids)) + [0] * (width - len(ids)) for ids, _ in rests]
    labels = [
        [token if learned else -100 for token, learned in zip(ids, mask, strict=True)]
        + [-100] * (width - len(ids))
        for ids, mask in rests
    ]
    output = model(
        input_ids=torch.tensor(input_ids),
        attention_mask=torch.tensor(attention),
        labels=torch.tensor(labels),
        **{cache_argument: cache},
    )
    return output.loss
