"""A tiny causal LM built offline, so the service (and its tests) can train without a model hub.

The recipe (Qwen2, hidden 64, 2 layers, initializer_range 0.1) is the smallest one measured to
learn a simple reward with GRPO + LoRA in a few dozen CPU steps (docs/measured-facts.md).
``rft-tiny-tools`` (service/base_models/built_in/tiny_tool_model.py) is its tool-calling sibling.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from service.base_models.built_in.model_building import (
    IM_END,
    IM_START,
    TINY_QWEN2_SHAPE,
    build_bpe_tokenizer,
    ensure_built,
)
from service.base_models.built_in.model_building import (
    directory_digest as directory_digest,
)
from service.base_models.built_in.model_building import (
    save_qwen2 as save_qwen2,
)
from service.base_models.built_in.tiny_tool_model import (
    TINY_TOOL_MODEL_NAME,
    ensure_tiny_tool_model,
)

TINY_MODEL_NAME = "rft-tiny"
# The models resolve_base_model builds itself.
BUILT_IN_MODEL_NAMES = frozenset({TINY_MODEL_NAME, TINY_TOOL_MODEL_NAME})

# Bump when the recipe changes: the cache directory is named after it, so old builds are ignored.
_RECIPE_VERSION = 1
_SEED = 7
_VOCAB_SIZE = 448
_CORPUS_LINES = 4000

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_WORD_TEXT = (
    "the a an and of to in is it that for on with as was at by be this from or are not have "
    "apple banana cat dog alpha beta gamma data model reward train step token letter word "
    "write say give answer question please repeat about story short long only some many "
    "aaa bbb abracadabra banana papaya java lava salsa yes no one two three four five"
)
_WORDS = _WORD_TEXT.split()
_ROLES = ("user", "assistant", "system")


def tiny_model_dir(cache_dir: Path) -> Path:
    return Path(cache_dir) / f"{TINY_MODEL_NAME}-v{_RECIPE_VERSION}"


def resolve_base_model(name: str, cache_dir: Path) -> str:
    """The path or hub id to load for ``name``: the built-in tiny models are built on first use."""
    if name == TINY_MODEL_NAME:
        return str(ensure_tiny_model(cache_dir))
    if name == TINY_TOOL_MODEL_NAME:
        return str(ensure_tiny_tool_model(cache_dir))
    return name


def ensure_tiny_model(cache_dir: Path) -> Path:
    """Build the tiny model under ``cache_dir`` unless it is already there; return its directory
    (built once under a lock, landing with one rename: see ``ensure_built``)."""
    return ensure_built(tiny_model_dir(cache_dir), _build)


def _corpus() -> Iterator[str]:
    """Deterministic text shaped like what the model will see: plain lines and ChatML turns."""
    rng = random.Random(_SEED)
    for _ in range(_CORPUS_LINES):
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 12)))
        if rng.random() < 0.5:
            role = rng.choice(_ROLES)
            yield f"{IM_START}{role}\n{words}{IM_END}\n"
        else:
            yield words.capitalize() + rng.choice(".?!:")


def _build(out_dir: Path) -> None:
    tokenizer = build_tokenizer(out_dir)
    save_qwen2(out_dir, tokenizer, **TINY_QWEN2_SHAPE)


def build_tokenizer(out_dir: Path) -> Any:
    """The recipe's byte-level BPE tokenizer with a ChatML template, saved in ``out_dir``."""
    return build_bpe_tokenizer(
        out_dir, corpus=_corpus(), vocab_size=_VOCAB_SIZE, chat_template=CHATML_TEMPLATE
    )
