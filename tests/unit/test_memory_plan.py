"""The GPU-memory arithmetic of a job with vLLM colocated (service.gpu.memory_plan), on the
published config.json values of real models (Qwen2.5 0.5B, 7B, 14B on the hub)."""

from __future__ import annotations

from typing import Any

import pytest

from service.gpu.memory_plan import (
    GIB,
    JobMemory,
    ModelShape,
    UnknownModelShape,
    plan_memory,
)
from service.jobs.hyperparameters import Hyperparameters

QWEN25_0_5B = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "max_position_embeddings": 32768,
    "num_attention_heads": 14,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "vocab_size": 151936,
}
QWEN25_7B = {
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "max_position_embeddings": 32768,
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 152064,
}
QWEN25_14B = {
    "hidden_size": 5120,
    "intermediate_size": 13824,
    "max_position_embeddings": 32768,
    "num_attention_heads": 40,
    "num_hidden_layers": 48,
    "num_key_value_heads": 8,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 152064,
}


def job(**hyperparameters: Any) -> JobMemory:
    devices = hyperparameters.pop("num_devices", 1)
    engine = hyperparameters.pop("engine", "ddp")
    hp = Hyperparameters.model_validate({"max_prompt_length": 512, **hyperparameters})
    return JobMemory.from_hyperparameters(hp, num_devices=devices, engine=engine)


@pytest.mark.parametrize(
    ("config", "published_billions", "tied"),
    [(QWEN25_0_5B, 0.49, True), (QWEN25_7B, 7.61, False), (QWEN25_14B, 14.7, False)],
)
def test_parameters_are_counted_from_the_config(
    config: dict[str, Any], published_billions: float, tied: bool
) -> None:
    shape = ModelShape.from_config(config)
    # The model cards' counts (Qwen2.5: 0.49B, 7.61B, 14.7B), q/k/v biases left out.
    assert shape.parameters / 1e9 == pytest.approx(published_billions, rel=0.01)
    assert shape.context_length == 32768


def test_the_checkpoint_index_gives_the_weights_when_there_is_one() -> None:
    # model.safetensors.index.json's metadata.total_size, in the config's bf16.
    shape = ModelShape.from_config(QWEN25_7B, checkpoint_bytes=15_231_233_024)
    assert shape.parameters == 7_615_616_512
    assert shape.weight_bytes() == 15_231_233_024
    # A float32 checkpoint holds the same parameters in twice the bytes.
    fp32 = ModelShape.from_config({**QWEN25_7B, "torch_dtype": "float32"}, checkpoint_bytes=8000)
    assert fp32.parameters == 2000


def test_kv_cache_per_token_and_its_split_over_tensor_parallel_gpus() -> None:
    shape = ModelShape.from_config(QWEN25_7B)
    # K and V x 28 layers x 4 KV heads x head_dim 128 x 2 bytes.
    assert shape.head_dim == 128
    assert shape.kv_bytes_per_token() == 2 * 28 * 4 * 128 * 2 == 57_344
    assert shape.kv_bytes_per_token(2) == 57_344 // 2
    # Eight GPUs, four KV heads: vLLM replicates them, one head per GPU.
    assert shape.kv_bytes_per_token(8) == 57_344 // 4


def test_lora_parameters_follow_rank_and_target_modules() -> None:
    shape = ModelShape.from_config(QWEN25_7B)
    per_layer = (3584 + 3584) * 2 + (3584 + 512) * 2 + (3584 + 18944) * 3
    assert shape.lora_parameters(16, "all-linear") == 28 * 16 * per_layer == 40_370_176
    assert shape.lora_parameters(8, ["q_proj", "v_proj"]) == 28 * 8 * (7168 + 4096)


def test_7b_at_the_defaults_on_an_80_gib_gpu() -> None:
    shape = ModelShape.from_config(QWEN25_7B)
    plan = plan_memory(shape, job(), 80.0)
    assert plan.fits
    # Every number below is worked out here from the config, not read back from the plan.
    # Parameters without q/k/v biases: embeddings and the untied output layer, then per layer
    # q and o (3584 x 3584), k and v (3584 x 512), the MLP's three 3584 x 18944, two norms.
    per_layer = 2 * 3584 * 3584 + 2 * 3584 * 512 + 3 * 3584 * 18944 + 2 * 3584
    parameters = 2 * 152064 * 3584 + 28 * per_layer + 3584
    assert parameters == 7_615_487_488  # the index's 7_615_616_512 less 28 x 4608 biases
    weights_gib = parameters * 2 / GIB  # bf16
    assert plan.vllm_weights_gib == pytest.approx(weights_gib)
    assert plan.trainer_weights_gib == pytest.approx(weights_gib)  # the trainer's own copy
    # LoRA r16 on every linear: fp32 weight and gradient, Adam's two fp32 moments.
    lora_gib = 40_370_176 * (4 + 4 + 4 + 4) / GIB
    assert plan.lora_gib == pytest.approx(lora_gib)
    # 4 prompts x 8 completions of 512 + 512 tokens.
    assert plan.kv_tokens == 32 * 1024
    assert plan.kv_gib == pytest.approx(32 * 1024 * 57_344 / GIB) == 1.75
    # micro_batch_size 16 (auto): 16 x 1024 tokens through the trainer at a time, layer
    # inputs kept (activation checkpointing), one layer recomputed, and the logits.
    tokens = 16 * 1024
    kept = 28 * tokens * 3584 * 2 + tokens * 2 * (12 * 3584 + 4 * 18944)
    logits = 16 * 512 * 152064 * 6
    activations_gib = (kept + logits) / GIB
    assert plan.activations_gib == pytest.approx(activations_gib)
    # vLLM: weights, KV cache, 2 GiB runtime; the trainer: weights, LoRA, activations, 1.5 GiB.
    kv_gib = 1.75
    total_gib = weights_gib + kv_gib + 2.0 + weights_gib + lora_gib + activations_gib + 1.5
    assert plan.total_gib == pytest.approx(total_gib)
    assert plan.total_gib == pytest.approx(47.9, abs=0.05)
    # vLLM gets what it needs plus half of what is left: (18.0 + (80 - 47.9) / 2) / 80.
    assert plan.utilization == 0.42
    # TRL's fixed 0.3 (24 GiB) would leave this 7B model ~8 GiB of KV cache; it now gets
    # 0.42 x 80 - 14.2 - 2 = 17.4 GiB.


def test_14b_needs_the_medium_preset_on_80_gib_and_says_why_not_otherwise() -> None:
    shape = ModelShape.from_config(QWEN25_14B)
    refused = plan_memory(shape, job(), 80.0)
    assert not refused.fits and refused.utilization is None
    assert refused.problem is not None
    assert "weights 27.5 GiB + KV 6.0 GiB + vLLM runtime 2.0 GiB + trainer 48.1 GiB" in (
        refused.problem
    )
    assert "= 83.6 GiB > device 80.0 GiB" in refused.problem
    assert "micro_batch_size" in refused.problem and "vllm_sleep_mode" in refused.problem
    medium = plan_memory(shape, job(preset="medium"), 80.0)
    assert medium.fits and medium.utilization == 0.5
    assert medium.total_gib == pytest.approx(70.1, abs=0.05)
    # The old fixed share cannot even hold its weights: vLLM would not start.
    given = plan_memory(shape, job(preset="medium", vllm_gpu_memory_utilization=0.3), 80.0)
    assert given.problem is not None and "less than it needs to start" in given.problem


def test_sleep_mode_keeps_vllm_and_the_trainers_activations_apart() -> None:
    shape = ModelShape.from_config(QWEN25_14B)
    plan = plan_memory(shape, job(vllm_sleep_mode=True), 80.0)
    assert plan.fits
    static = plan.trainer_weights_gib + plan.lora_gib + 1.5
    assert plan.total_gib == pytest.approx(static + max(plan.vllm_gib, plan.activations_gib + 2.0))
    assert "the larger of vLLM" in plan.arithmetic()


def test_tensor_parallelism_splits_vllm_and_fsdp_the_trainer() -> None:
    shape = ModelShape.from_config(QWEN25_14B)
    one = plan_memory(shape, job(), 48.0)
    assert not one.fits
    split = plan_memory(shape, job(num_devices=2, engine="fsdp", vllm_tensor_parallel_size=2), 48.0)
    assert split.vllm_weights_gib == pytest.approx(one.vllm_weights_gib / 2)
    # FSDP keeps half the weights, and gathers whole the embeddings and output layer (2 x
    # 152064 x 5120) and two decoder layers at a time.
    layer = 2 * 5120 * 5120 + 2 * 5120 * 1024 + 3 * 5120 * 13824 + 2 * 5120
    gathered = 2 * (2 * 152064 * 5120 + 2 * layer)
    assert split.trainer_weights_gib == pytest.approx(one.trainer_weights_gib / 2 + gathered / GIB)
    # Each engine generates its two ranks' completions (all 32), half the KV heads per GPU.
    assert split.kv_tokens == one.kv_tokens
    assert split.kv_gib == pytest.approx(one.kv_gib / 2)
    # Under ddp every rank keeps a whole copy of the weights for training.
    ddp = plan_memory(shape, job(num_devices=2, vllm_tensor_parallel_size=2), 48.0)
    assert ddp.trainer_weights_gib == pytest.approx(one.trainer_weights_gib)


def test_tensor_parallel_size_must_divide_the_attention_heads() -> None:
    plan = plan_memory(
        ModelShape.from_config(QWEN25_7B), job(num_devices=8, vllm_tensor_parallel_size=8), 80.0
    )
    assert plan.problem is not None and "28 attention heads" in plan.problem


def test_without_a_prompt_cap_the_kv_cache_holds_one_whole_context() -> None:
    shape = ModelShape.from_config(QWEN25_14B)
    hp = Hyperparameters.model_validate({"preset": "medium", "max_completion_length": 256})
    uncapped = JobMemory.from_hyperparameters(hp)
    assert uncapped.max_model_len is None and uncapped.prompt_tokens == 512
    # 32 x (512 assumed + 256) = 24576 tokens, but vLLM needs one 32768-token sequence.
    assert plan_memory(shape, uncapped, 80.0).kv_tokens == 32768
    capped = JobMemory.from_hyperparameters(hp.model_copy(update={"max_prompt_length": 256}))
    assert capped.max_model_len == 512
    assert plan_memory(shape, capped, 80.0).kv_tokens == 32 * 512


def test_a_small_model_fits_a_24_gib_gpu() -> None:
    plan = plan_memory(ModelShape.from_config(QWEN25_0_5B), job(), 24.0)
    assert plan.fits and plan.utilization is not None and 0.2 < plan.utilization < 0.95


def test_a_config_without_the_shape_is_refused() -> None:
    with pytest.raises(UnknownModelShape, match="num_hidden_layers"):
        ModelShape.from_config({"model_type": "bert"})


def test_the_vllm_hyperparameters_are_validated() -> None:
    from pydantic import ValidationError

    defaults = Hyperparameters()
    assert defaults.vllm_gpu_memory_utilization is None  # computed at the job's start
    assert (defaults.vllm_tensor_parallel_size, defaults.vllm_sleep_mode) == (1, False)
    assert defaults.vllm_max_model_length is None
    with pytest.raises(ValidationError, match="leaves no room"):
        Hyperparameters(
            max_prompt_length=512, max_completion_length=512, vllm_max_model_length=1000
        )
    for bad in (
        {"vllm_gpu_memory_utilization": 0},
        {"vllm_gpu_memory_utilization": 1.2},
        {"vllm_tensor_parallel_size": 0},
    ):
        with pytest.raises(ValidationError):
            Hyperparameters.model_validate(bad)
