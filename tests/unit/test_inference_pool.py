"""The inference server's model pool: adapters swapped on one loaded base model, LRU-evicted,
and never read from outside the artifact store."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from service.base_models.built_in.tiny_model import TINY_MODEL_NAME, ensure_tiny_model
from service.inference.protocol import AdapterRef, GenerationRequest
from service.settings import Settings
from workers.inference.pool import InferenceInputError, ModelPool


def make_adapter(model_dir: Path, destination: Path, seed: int) -> str:
    """A LoRA adapter with large random weights, so it changes what the model says."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(model_dir),
        LoraConfig(r=8, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM"),
    )
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_" in name:
                parameter.normal_(0, 0.5)
    model.save_pretrained(destination)
    return str(destination)


def ask(pool: ModelPool, adapter: str | None) -> str:
    result = pool.generate(
        GenerationRequest(
            base_model=TINY_MODEL_NAME,
            adapter=AdapterRef(uri=adapter) if adapter else None,
            messages=[{"role": "user", "content": "Write about cats:"}],
            max_tokens=12,
            temperature=0,
            top_p=1,
            n=1,
        )
    )
    return result.choices[0].text


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("inference-state")


@pytest.fixture(scope="module")
def adapters(state_dir: Path) -> list[str]:
    model_dir = ensure_tiny_model(state_dir / "models")
    return [
        make_adapter(model_dir, state_dir / "artifacts" / f"job_{seed}" / "adapter", seed)
        for seed in (1, 2)
    ]


def test_adapters_swap_on_one_base_and_evict_least_recently_used(
    state_dir: Path, adapters: list[str]
) -> None:
    pool = ModelPool(Settings(state_dir=state_dir, inference_max_adapters=1))
    base = ask(pool, None)
    first = ask(pool, adapters[0])
    second = ask(pool, adapters[1])  # evicts the first (one adapter kept)
    assert len({base, first, second}) == 3
    (loaded,) = pool._bases.values()
    assert list(loaded.adapters.values()) == [adapters[1]]
    # Reloaded after eviction, switched back and forth: the same answers each time.
    assert ask(pool, adapters[0]) == first
    assert ask(pool, None) == base
    assert ask(pool, adapters[1]) == second
    assert len(loaded.adapters) == 1


def test_adapters_outside_the_artifact_store_are_refused(state_dir: Path, tmp_path: Path) -> None:
    pool = ModelPool(Settings(state_dir=state_dir))
    with pytest.raises(InferenceInputError, match="not in the artifact store"):
        ask(pool, str(tmp_path))
    with pytest.raises(InferenceInputError, match="no longer in the artifact store"):
        ask(pool, str(state_dir / "artifacts" / "job_gone" / "adapter"))


def test_a_request_past_the_models_context_is_refused(state_dir: Path) -> None:
    pool = ModelPool(Settings(state_dir=state_dir))
    request = GenerationRequest(
        base_model=TINY_MODEL_NAME, prompt="the cat", max_tokens=4096, temperature=0, top_p=1, n=1
    )
    with pytest.raises(InferenceInputError, match="exceed the context of 'rft-tiny'"):
        pool.generate(request)
