"""A tiny causal LM built offline, so the service (and its tests) can train without a model hub.

The recipe (Qwen2, hidden 64, 2 layers, initializer_range 0.1) is the smallest one measured to
learn a simple reward with GRPO + LoRA in a few dozen CPU steps (docs/measured-facts.md).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TINY_MODEL_NAME = "rft-tiny"

# Bump when the recipe changes: the cache directory is named after it, so old builds are ignored.
_RECIPE_VERSION = 1
_SEED = 7
_VOCAB_SIZE = 448
_CORPUS_LINES = 4000

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
PAD = "<|pad|>"
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END, PAD]

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
    """The path or hub id to load for ``name``: the built-in tiny model is built on first use."""
    if name == TINY_MODEL_NAME:
        return str(ensure_tiny_model(cache_dir))
    return name


def ensure_tiny_model(cache_dir: Path) -> Path:
    """Build the tiny model under ``cache_dir`` unless it is already there; return its directory.

    Concurrent callers (two workers starting at once) serialize on a lock file, and the build
    lands in place with one rename, so nobody ever loads a half-written directory.
    """
    cache_dir = Path(cache_dir)
    target = tiny_model_dir(cache_dir)
    if (target / "config.json").is_file():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "config.json").is_file():
            return target
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=cache_dir))
        try:
            _build(staging)
            os.rename(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return target


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
    save_qwen2(
        out_dir,
        tokenizer,
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        # With the default 0.02 the logits stay near uniform and GRPO cannot sharpen them.
        initializer_range=0.1,
    )


def build_tokenizer(out_dir: Path) -> Any:
    """The recipe's byte-level BPE tokenizer with a ChatML template, saved in ``out_dir``."""
    # Imported here: the API process resolves names without needing torch or transformers.
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=_VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=None,
        eos_token=IM_END,
        pad_token=PAD,
        unk_token=None,
        additional_special_tokens=[ENDOFTEXT, IM_START],
    )
    fast.chat_template = CHATML_TEMPLATE
    fast.save_pretrained(out_dir)
    return fast


def save_qwen2(
    out_dir: Path,
    tokenizer: Any,
    *,
    hidden_size: int,
    intermediate_size: int,
    num_hidden_layers: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    initializer_range: float,
) -> None:
    """A randomly initialised Qwen2 for ``tokenizer``, saved in ``out_dir`` (seeded: the same
    arguments give byte-identical weights). Benchmarks build larger ones with it."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        initializer_range=initializer_range,
        bos_token_id=None,
        eos_token_id=_token_id(tokenizer, IM_END),
        pad_token_id=_token_id(tokenizer, PAD),
    )
    # A private RNG stream: building the model must not disturb (or depend on) the caller's seed.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_SEED)
        model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(out_dir)


def _token_id(tokenizer: Any, token: str) -> int:
    token_id = tokenizer.convert_tokens_to_ids(token)
    assert isinstance(token_id, int), token
    return token_id


def directory_digest(directory: Path) -> str:
    """A hash over every file's name and bytes: equal digests mean byte-identical builds."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(directory).rglob("*") if p.is_file()):
        digest.update(path.relative_to(directory).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()
