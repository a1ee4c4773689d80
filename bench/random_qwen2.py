"""The larger models the benchmarks train and export: Qwen2s of real layer shapes with random
weights and the tiny model's tokenizer (vocabulary 448), built offline once into a folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# The 13M-class model (docs/measured-facts.md: 0.6-0.9 s/step on CPU): head_dim 64, which vLLM's
# CPU attention accepts (it needs >= 32).
QWEN2_13M: dict[str, Any] = {
    "hidden_size": 384,
    "intermediate_size": 1536,
    "num_hidden_layers": 6,
    "num_attention_heads": 6,
    "num_key_value_heads": 2,
    "initializer_range": 0.1,
}

# ~70M parameters: 12 layers of hidden 768 (head_dim 64, 2 KV heads), MLP 2048.
MID_MODEL: dict[str, Any] = {
    "hidden_size": 768,
    "intermediate_size": 2048,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "initializer_range": 0.02,
}

# Qwen2.5-0.5B's layers (hidden 896, 24 layers, 14 heads, 2 KV heads, MLP 4864): ~360M
# parameters with the tiny model's vocabulary.
HALF_B_MODEL: dict[str, Any] = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "initializer_range": 0.02,
}


def build_random_qwen2(directory: Path, shape: dict[str, Any]) -> Path:
    """A random Qwen2 of ``shape`` with the tiny model's tokenizer, built once into
    ``directory`` (reused when already there)."""
    from service.base_models.built_in.tiny_model import build_tokenizer, save_qwen2

    if not (directory / "config.json").is_file():
        directory.mkdir(parents=True, exist_ok=True)
        save_qwen2(directory, build_tokenizer(directory), **shape)
    return directory
