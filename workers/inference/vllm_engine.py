"""vLLM as the inference server's generator: one engine per base model, LoRA adapters per request.

Why vLLM where it runs: its multi-LoRA serving keeps a base model's weights once and applies an
adapter per request (``LoRARequest``), with adapters cached by vLLM itself, so switching
between a base model and its jobs' adapters costs no reload; it also batches and pages the KV
cache. Only the generate call lives here: the pool encodes the prompt (chat template included)
and builds the answer from the token ids returned, exactly as for transformers.

Imported only when the pool chose vLLM (``workers.training.generation.choose_generation``):
the main environment has no vLLM.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.inference.protocol import GenerationRequest
from workers.training.generation import Generation

# The largest LoRA rank an engine accepts; vLLM sizes its adapter slots by it. Jobs' default
# rank is 16 and TRL's LoRA guide finds 1-32 enough for RL; a larger adapter is refused (400).
MAX_LORA_RANK = 64
# Adapters applied within one batch. The pool generates one request at a time, so one slot is
# enough; the other adapters wait in vLLM's CPU-side cache (max_cpu_loras), a copy away.
MAX_LORAS_PER_BATCH = 1


@dataclass(frozen=True)
class VllmOutput:
    """One generated sequence: its token ids and whether vLLM stopped it (EOS or stop string)."""

    token_ids: list[int]
    stopped: bool


def load_engine(
    model_path: str, generation: Generation, max_adapters: int, max_model_length: int | None
) -> Any:
    """A ``vllm.LLM`` for one base model, ready to take LoRA adapters per request."""
    # The engine runs in this process: the server is not started under a __main__ guard, and
    # a separate engine process would only add a copy of each request on a shared machine.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM

    options: dict[str, Any] = {}
    if max_model_length is not None:
        options["max_model_len"] = max_model_length
    return LLM(
        model=model_path,
        enable_lora=True,
        max_loras=MAX_LORAS_PER_BATCH,
        max_cpu_loras=max(max_adapters, MAX_LORAS_PER_BATCH),
        max_lora_rank=MAX_LORA_RANK,
        gpu_memory_utilization=generation.memory_fraction,
        **options,
    )


def context_length(engine: Any) -> int:
    return int(engine.llm_engine.model_config.max_model_len)


def lora_rank(adapter_directory: Path) -> int:
    """The largest rank in a PEFT adapter's config (``r``, or a per-layer ``rank_pattern``)."""
    config = json.loads((adapter_directory / "adapter_config.json").read_text())
    per_layer = config.get("rank_pattern") or {}
    return max([int(config.get("r", 0)), *(int(rank) for rank in per_layer.values())])


def generate(
    engine: Any,
    prompt_token_ids: list[int],
    request: GenerationRequest,
    adapter: tuple[str, int, Path] | None,
) -> list[VllmOutput]:
    """``request``'s sequences (one under greedy decoding: the pool repeats it ``n`` times)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest

    sampling = request.temperature > 0
    params = SamplingParams(
        n=request.n if sampling else 1,
        max_tokens=request.max_tokens,
        temperature=request.temperature if sampling else 0.0,
        top_p=request.top_p if sampling else 1.0,
        seed=request.seed,
        # vLLM stops at a stop string; the pool still cuts the decoded text there itself.
        stop=[stop for stop in request.stop if stop] or None,
    )
    lora = None
    if adapter is not None:
        name, int_id, directory = adapter
        lora = LoRARequest(name, int_id, str(directory))
    (output,) = engine.generate(
        [TokensPrompt(prompt_token_ids=prompt_token_ids)],
        params,
        lora_request=lora,
        use_tqdm=False,
    )
    return [
        VllmOutput(token_ids=list(sequence.token_ids), stopped=sequence.finish_reason == "stop")
        for sequence in output.outputs
    ]


def shutdown(engine: Any) -> None:
    """Free an evicted engine's weights and KV cache (merely dropping it frees nothing: see
    ``workers.training.generation.release_vllm``)."""
    engine.llm_engine.engine_core.shutdown()
