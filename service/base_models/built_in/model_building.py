"""Building blocks of the built-in tiny models (``rft-tiny``, ``rft-tiny-tools``): a cached,
locked build that lands with one rename, a byte-level BPE tokenizer with ChatML's special
tokens, and a seeded random Qwen2."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
PAD = "<|pad|>"
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END, PAD]

# The seed of every random initialisation: the same shape gives byte-identical weights.
_INIT_SEED = 7


def ensure_built(target: Path, build: Callable[[Path], None]) -> Path:
    """Run ``build`` into a fresh directory that becomes ``target``, unless ``target`` is
    already built; return ``target``.

    Concurrent callers (two workers starting at once) serialize on a lock file, and the build
    lands in place with one rename, so nobody ever loads a half-written directory.
    """
    target = Path(target)
    if (target / "config.json").is_file():
        return target
    cache_dir = target.parent
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "config.json").is_file():
            return target
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=cache_dir))
        try:
            build(staging)
            os.rename(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return target


def build_bpe_tokenizer(
    out_dir: Path,
    *,
    corpus: Iterable[str],
    vocab_size: int,
    chat_template: str,
    plain_added_tokens: Sequence[str] = (),
) -> Any:
    """A byte-level BPE tokenizer trained on ``corpus``, with ChatML's special tokens
    (``<|im_end|>`` ends a turn) and ``chat_template``, saved in ``out_dir``.

    ``plain_added_tokens`` are kept whole but are not special, like Qwen's ``<tool_call>``:
    decoding with ``skip_special_tokens=True`` keeps them, so parsers of decoded text see them.
    """
    # Imported here: the API process resolves names without needing torch or transformers.
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    if plain_added_tokens:
        tokenizer.add_tokens(
            [AddedToken(token, special=False, normalized=False) for token in plain_added_tokens]
        )

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=None,
        eos_token=IM_END,
        pad_token=PAD,
        unk_token=None,
        additional_special_tokens=[ENDOFTEXT, IM_START],
    )
    fast.chat_template = chat_template
    fast.save_pretrained(out_dir)
    return fast


# The built-in models' shape: the smallest measured to learn a simple reward with GRPO + LoRA
# in a few dozen CPU steps (docs/measured-facts.md). With the default initializer_range 0.02
# the logits stay near uniform and GRPO cannot sharpen them.
TINY_QWEN2_SHAPE: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "initializer_range": 0.1,
}


def save_qwen2(out_dir: Path, tokenizer: Any, **shape: Any) -> None:
    """:func:`random_qwen2` of ``shape`` (its keyword arguments, as in
    :data:`TINY_QWEN2_SHAPE`) for ``tokenizer``, saved in ``out_dir`` (seeded: the same
    arguments give byte-identical weights). Benchmarks build larger ones with it."""
    random_qwen2(tokenizer, **shape).save_pretrained(out_dir)


def random_qwen2(
    tokenizer: Any,
    *,
    hidden_size: int,
    intermediate_size: int,
    num_hidden_layers: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    initializer_range: float,
    max_position_embeddings: int = 1024,
) -> Any:
    """A randomly initialised Qwen2ForCausalLM for ``tokenizer`` (seeded: the same arguments
    give the same weights), generating until ChatML's end of turn."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        initializer_range=initializer_range,
        bos_token_id=None,
        eos_token_id=token_id(tokenizer, IM_END),
        pad_token_id=token_id(tokenizer, PAD),
    )
    # A private RNG stream: building the model must not disturb (or depend on) the caller's seed.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_INIT_SEED)
        model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    return model


def token_id(tokenizer: Any, token: str) -> int:
    found = tokenizer.convert_tokens_to_ids(token)
    assert isinstance(found, int), token
    return found


def directory_digest(directory: Path) -> str:
    """A hash over every file's name and bytes: equal digests mean byte-identical builds."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(directory).rglob("*") if p.is_file()):
        digest.update(path.relative_to(directory).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()
