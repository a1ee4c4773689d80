"""How a job's model is trained: a LoRA adapter or every weight (``adapter``), the base in
4-bit (QLoRA), the attention kernel and the optimizer, as transformers, PEFT and TRL take them.

The CUDA-only options are checked before anything is loaded: a worker that cannot run one
fails the job at its start, naming the option, rather than training something else (the API
refuses them already where no running worker has a GPU: service.jobs.device_options).
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig
from transformers import AutoModelForCausalLM, TrainingArguments

from service.jobs.hyperparameters import Hyperparameters
from workers.failures import TrainingOptionUnavailable
from workers.training.starting_weights import with_starting_adapter

logger = logging.getLogger(__name__)

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


def load_trained_model(
    hp: Hyperparameters,
    model_path: str,
    args: TrainingArguments,
    *,
    use_cuda: bool,
    init_adapter: Path | None,
) -> tuple[Any, LoraConfig | None]:
    """The model a job trains (GRPO's and SFT's alike), and the ``peft_config`` its trainer
    wraps it with: None when it already wears its starting adapter (init_from) or when every
    weight trains."""
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    check_runnable(hp, use_cuda=use_cuda)
    base = AutoModelForCausalLM.from_pretrained(model_path, **model_load_kwargs(hp, dtype=dtype))
    # Where and how this rank trains, in the worker's log: the one line that tells a GPU job
    # from one that fell back to CPU.
    logger.info(
        "training on %s in %s (activation checkpointing %s): %s, attention %s, optimizer %s",
        f"cuda ({torch.cuda.get_device_name()})" if use_cuda else "cpu",
        str(dtype).removeprefix("torch."),
        "on" if args.gradient_checkpointing else "off",
        describe(hp) + (" from init_from's adapter" if init_adapter is not None else ""),
        hp.attn_implementation,
        args.optim,
    )
    lora = peft_config(hp)
    if init_adapter is None:
        return base, lora
    if lora is None:
        raise TrainingOptionUnavailable(
            "init_from continues a LoRA adapter: a job with adapter 'full' cannot start from one"
        )
    return with_starting_adapter(base, init_adapter, lora, args), None
