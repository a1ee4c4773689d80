"""A tiny reward model built offline: a sequence classifier whose score says how much a text
is written with the letter "a", so reward-model jobs train on a CPU without a model hub.

``rft-tiny-reward`` is the tiny Qwen2 shape (:data:`TINY_QWEN2_SHAPE`, the ``rft-tiny``
tokenizer) with a one-label score head, and hand-set weights instead of training (exact, and
built in a second, where training one took minutes on a shared CPU):

- each token's embedding carries the number of "a" characters it decodes to (``a``), plus a
  second component that keeps every embedding's RMS at 1, so RMSNorm leaves it as it is;
- the first layer's attention has zero queries and keys: every position attends uniformly to
  itself and the positions before it, and its value/output projections copy the ``a`` component
  into a free dimension. At the last token that dimension holds the mean of ``a`` over the
  whole text; every other projection (the MLPs, the second layer) is zero;
- the score head reads that dimension after the final norm.

The score of a text of mean ``m`` "a"s per token is ``m / sqrt(1 + m**2 / 64)``: about ``m``
for ordinary text (0.2 for "the dog is not", 1.1 for "banana papaya"), rising with every "a"
a completion adds. The chat template, when one applies, is part of the text (its "assistant"
has two).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from service.base_models.built_in.model_building import (
    IM_END,
    PAD,
    TINY_QWEN2_SHAPE,
    ensure_built,
    token_id,
)
from service.base_models.built_in.tiny_model import build_tokenizer

TINY_REWARD_MODEL_NAME = "rft-tiny-reward"
# The reward models resolve_reward_model builds itself.
BUILT_IN_REWARD_MODEL_NAMES = frozenset({TINY_REWARD_MODEL_NAME})

# Bump when anything below changes what gets built: the cache directory is named after it.
_RECIPE_VERSION = 1
# Embedding dimensions: the token's "a" count, the component that fixes its norm, and the one
# the attention writes the text's mean "a" count into (what the score head reads).
_A_COUNT, _NORM, _MEAN_A = 0, 1, 2


def tiny_reward_model_dir(cache_dir: Path) -> Path:
    return Path(cache_dir) / f"{TINY_REWARD_MODEL_NAME}-v{_RECIPE_VERSION}"


def resolve_reward_model(name: str, cache_dir: Path) -> str:
    """The path or hub id to load for a reward entry's ``model``: the built-in one is built
    on first use (under ``cache_dir``, as the built-in base models)."""
    if name == TINY_REWARD_MODEL_NAME:
        return str(ensure_tiny_reward_model(cache_dir))
    return name


def ensure_tiny_reward_model(cache_dir: Path) -> Path:
    """Build the tiny reward model under ``cache_dir`` unless it is there; return its directory."""
    return ensure_built(tiny_reward_model_dir(cache_dir), _build)


def _build(out_dir: Path) -> None:
    tokenizer = build_tokenizer(out_dir)
    letter_a_classifier(tokenizer).save_pretrained(out_dir)


def letter_a_classifier(tokenizer: Any) -> Any:
    """The hand-set Qwen2ForSequenceClassification described in the module docstring."""
    import torch
    from transformers import Qwen2Config, Qwen2ForSequenceClassification

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        **TINY_QWEN2_SHAPE,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=token_id(tokenizer, IM_END),
        pad_token_id=token_id(tokenizer, PAD),
    )
    config.num_labels = 1
    model = Qwen2ForSequenceClassification(config)
    # Norms of 1 after RMSNorm: every embedding's squares sum to hidden_size.
    radius = math.sqrt(config.hidden_size)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.fill_(1.0 if "norm" in name else 0.0)
        embeddings = model.model.embed_tokens.weight
        for index in range(len(tokenizer)):
            count = min(tokenizer.decode([index]).count("a"), int(radius))
            embeddings[index, _A_COUNT] = count
            embeddings[index, _NORM] = math.sqrt(radius**2 - count**2)
        attention = model.model.layers[0].self_attn
        # One key/value head shared by both query heads: head 0's output is enough.
        attention.v_proj.weight[0, _A_COUNT] = 1.0
        attention.o_proj.weight[_MEAN_A, 0] = 1.0
        model.score.weight[0, _MEAN_A] = 1.0
    return model
