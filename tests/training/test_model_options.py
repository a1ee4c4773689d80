"""Training every weight (adapter 'full') and the other model options, on the tiny model.

The CUDA-only ones (QLoRA's 4-bit base, the 8-bit optimizer, flash attention) are refused on a
CPU worker before anything loads; tests/gpu/test_one_gpu_job.py trains QLoRA on a GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from service.base_models.built_in.tiny_model import resolve_base_model
from service.demo import demo_dataset
from service.jobs.hyperparameters import Hyperparameters
from tests.tiny import TINY_HYPERPARAMETERS
from workers.failures import TrainingOptionUnavailable
from workers.training import model_options
from workers.training.grpo import TrainingSpec, run_grpo
from workers.training.step_records import RewardConfig

from .harness import RecordingObserver, letter_config, reward_sandbox


def hyperparameters(**changes: object) -> Hyperparameters:
    return Hyperparameters.model_validate({**TINY_HYPERPARAMETERS, **changes})


def test_full_fine_tuning_trains_every_weight_and_saves_a_whole_model(
    tmp_path: Path, model_cache_dir: Path
) -> None:
    spec = TrainingSpec(
        base_model="rft-tiny",
        dataset=demo_dataset(),
        reward_config=letter_config(),
        hyperparameters=hyperparameters(
            adapter="full", train_steps=3, learning_rate=1e-3, attn_implementation="eager"
        ),
        output_dir=tmp_path,
        model_cache_dir=model_cache_dir,
    )
    sandbox = reward_sandbox()
    observer = RecordingObserver()
    try:
        outcome = run_grpo(spec, sandbox, observer)
    finally:
        sandbox.close()
    assert [record.step for record in observer.records] == [1, 2, 3]
    saved = outcome.adapter_path
    assert saved is not None
    assert (saved / "config.json").is_file() and (saved / "model.safetensors").is_file()
    assert not (saved / "adapter_config.json").exists()

    base = AutoModelForCausalLM.from_pretrained(resolve_base_model("rft-tiny", model_cache_dir))
    tuned = AutoModelForCausalLM.from_pretrained(saved)
    base_weights, tuned_weights = base.state_dict(), tuned.state_dict()
    assert sorted(base_weights) == sorted(tuned_weights)
    changed = [
        name
        for name, tensor in tuned_weights.items()
        if not torch.equal(tensor, base_weights[name])
    ]
    # Every kind of weight trained, not only adapters' targets: the embeddings and norms too.
    assert any("embed_tokens" in name for name in changed), changed
    assert any("norm" in name for name in changed), changed
    assert any("mlp" in name for name in changed), changed


def test_a_lora_job_loads_with_the_asked_attention_and_adapter() -> None:
    hp = hyperparameters(attn_implementation="eager", lora_rank=4)
    config = model_options.peft_config(hp)
    assert config is not None and config.r == 4
    assert model_options.peft_config(hyperparameters(adapter="full")) is None
    kwargs = model_options.model_load_kwargs(hp, dtype=torch.float32)
    assert kwargs == {"dtype": torch.float32, "attn_implementation": "eager"}
    assert model_options.optimizer_name(hp) == "adamw_torch"
    assert model_options.optimizer_name(hyperparameters(optimizer="adamw_8bit")) == (
        "adamw_bnb_8bit"
    )


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"quantization": "4bit"}, "quantization '4bit'"),
        ({"optimizer": "adamw_8bit"}, "optimizer 'adamw_8bit'"),
        ({"attn_implementation": "flash_attention_2"}, "flash_attention_2"),
    ],
)
def test_a_cpu_worker_refuses_cuda_only_options_naming_them(
    changes: dict[str, str], named: str
) -> None:
    with pytest.raises(TrainingOptionUnavailable, match="need a CUDA GPU") as refused:
        model_options.check_runnable(hyperparameters(**changes), use_cuda=False)
    assert named in str(refused.value)


def test_qlora_cannot_train_every_weight() -> None:
    with pytest.raises(ValueError, match="cannot be combined with adapter 'full'"):
        hyperparameters(adapter="full", quantization="4bit")


def test_an_sft_job_trains_every_weight_too(tmp_path: Path, model_cache_dir: Path) -> None:
    """The supervised trainer takes the same options (workers.training.sft)."""
    from workers.training.sft import run_sft

    rows = [
        {"messages": [{"role": "user", "content": f"Say {w}"}, {"role": "assistant", "content": w}]}
        for w in ("apple", "banana", "cherry", "date")
    ]
    spec = TrainingSpec(
        base_model="rft-tiny",
        method="sft",
        dataset=rows,
        reward_config=RewardConfig(version=1, functions=[]),
        hyperparameters=Hyperparameters.model_validate(
            {"preset": "tiny-cpu", "train_steps": 2, "batch_size": 4, "adapter": "full"}
        ),
        output_dir=tmp_path,
        model_cache_dir=model_cache_dir,
    )
    outcome = run_sft(spec, RecordingObserver())
    assert outcome.steps_completed == 2
    saved = outcome.adapter_path
    assert saved is not None and (saved / "model.safetensors").is_file()
    assert not (saved / "adapter_config.json").exists()
