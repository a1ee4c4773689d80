"""How a job's model is trained: a LoRA adapter or every weight (``adapter``), the base in
4-bit (QLoRA), the attention kernel and the optimizer, as transformers, PEFT and TRL take them.

The CUDA-only options are checked before anything is loaded: a worker that cannot run one
fails the job at its start, naming the option, rather than training something else (the API
refuses them already where no running worker has a GPU: service.jobs.device_options).
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch
from peft import LoraConfig

from service.jobs.hyperparameters import Hyperparameters
from workers.failures import TrainingOptionUnavailable

# transformers' name (OptimizerNames) of bitsandbytes' 8-bit AdamW.
BNB_ADAMW_8BIT = "adamw_bnb_8bit"


def check_runnable(hp: Hyperparameters, *, use_cuda: bool) -> None:
    """Raise TrainingOptionUnavailable when this worker cannot run an option the job asks for."""
    wanted = hp.cuda_only_options()
    if wanted and not use_cuda:
        raise TrainingOptionUnavailable(
            f"{' and '.join(wanted)} need a CUDA GPU; this worker trains on CPU. Drop the "
            "option, or run the job on a GPU worker."
        )
    needs_bitsandbytes = hp.quantization == "4bit" or hp.optimizer == "adamw_8bit"
    if needs_bitsandbytes and importlib.util.find_spec("bitsandbytes") is None:
        raise TrainingOptionUnavailable(
            "quantization '4bit' and optimizer 'adamw_8bit' need the bitsandbytes package, "
            "which this worker lacks (pip install 'rft-service[qlora]')"
        )
    if hp.attn_implementation == "flash_attention_2" and (
        importlib.util.find_spec("flash_attn") is None
    ):
        raise TrainingOptionUnavailable(
            "attn_implementation 'flash_attention_2' needs the flash-attn package, which this "
            "worker lacks; use 'sdpa' (the default)"
        )


def describe(hp: Hyperparameters) -> str:
    """What trains, for the worker's log: 'LoRA adapter (rank 16)', 'every weight'..."""
    if hp.adapter == "full":
        return "every weight"
    base = " over a 4-bit NF4 base (QLoRA)" if hp.quantization == "4bit" else ""
    return f"LoRA adapter (rank {hp.lora_rank}){base}"


def peft_config(hp: Hyperparameters) -> LoraConfig | None:
    """The LoRA adapter to train, or None when every weight trains (``adapter='full'``)."""
    if hp.adapter == "full":
        return None
    return LoraConfig(
        r=hp.lora_rank,
        lora_alpha=hp.lora_alpha,
        lora_dropout=hp.lora_dropout,
        target_modules=hp.lora_target_modules,
        task_type="CAUSAL_LM",
    )


def model_load_kwargs(hp: Hyperparameters, *, dtype: torch.dtype) -> dict[str, Any]:
    """``from_pretrained``'s arguments for the trained model."""
    kwargs: dict[str, Any] = {"dtype": dtype, "attn_implementation": hp.attn_implementation}
    if hp.quantization == "4bit":
        from transformers import BitsAndBytesConfig

        # QLoRA's recipe (Dettmers et al. 2023): NF4 with double quantization, bf16 compute.
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16,
        )
    return kwargs


def optimizer_name(hp: Hyperparameters) -> str:
    """TrainingArguments' ``optim``."""
    return BNB_ADAMW_8BIT if hp.optimizer == "adamw_8bit" else "adamw_torch"
