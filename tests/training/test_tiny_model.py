from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from service.base_models.built_in.tiny_model import (
    TINY_MODEL_NAME,
    directory_digest,
    ensure_tiny_model,
    resolve_base_model,
)


def test_builds_byte_identical_models(tmp_path: Path, model_cache_dir: Path) -> None:
    first = ensure_tiny_model(model_cache_dir)
    second = ensure_tiny_model(tmp_path / "elsewhere")
    assert first != second
    assert directory_digest(first) == directory_digest(second)
    # A second call reuses the build instead of rebuilding.
    assert ensure_tiny_model(model_cache_dir) == first
    # (The cache is shared with other built-in models' tests: only rft-tiny's builds count.)
    builds = [p.name for p in model_cache_dir.iterdir() if p.name.startswith("rft-tiny-v")]
    assert builds == [first.name]


def test_reloads_and_generates_with_chatml(model_cache_dir: Path) -> None:
    path = ensure_tiny_model(model_cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model: Any = AutoModelForCausalLM.from_pretrained(path)

    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token == "<|pad|>"
    assert 384 <= len(tokenizer) <= 512
    assert model.config.tie_word_embeddings
    assert sum(p.numel() for p in model.parameters()) < 200_000

    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "say a"}], add_generation_prompt=True, tokenize=False
    )
    assert text == "<|im_start|>user\nsay a<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer(text, return_tensors="pt")
    torch.manual_seed(0)
    output = model.generate(**ids, max_new_tokens=8, do_sample=True)
    assert output.shape[1] > ids["input_ids"].shape[1]


def test_resolve_base_model(model_cache_dir: Path) -> None:
    assert resolve_base_model(TINY_MODEL_NAME, model_cache_dir) == str(
        ensure_tiny_model(model_cache_dir)
    )
    assert resolve_base_model("Qwen/Qwen2.5-0.5B", model_cache_dir) == "Qwen/Qwen2.5-0.5B"
    assert resolve_base_model("/models/local", model_cache_dir) == "/models/local"


def test_concurrent_builds_agree(tmp_path: Path) -> None:
    # Two worker processes starting at once on an empty cache: one builds, the other waits.
    context = multiprocessing.get_context("fork")
    with context.Pool(2) as pool:
        paths = pool.map(ensure_tiny_model, [tmp_path, tmp_path])
    assert paths[0] == paths[1]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
        paths[0].name
    ]
    assert not [p for p in tmp_path.iterdir() if p.is_dir() and p.name.startswith(".")]
