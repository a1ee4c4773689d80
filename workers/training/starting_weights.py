"""A job created with init_from starts from another job's LoRA weights (the job's own copy of
them, ``TrainingSpec.init_adapter``) and, if asked, from that checkpoint's optimizer state.

TRL gets the model already wearing the adapter (a ``PeftModel``, no ``peft_config``): it then
keeps a frozen copy of it as the reference of the KL term (beta > 0), so the new job is held
near where it started, not near the base model. A resumed job is built the same way and its
checkpoint loads over the adapter: the starting weights never replace what it trained since.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, PeftModel
from transformers import (
    PreTrainedModel,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)

from workers.failures import UserFacingFailure


def with_starting_adapter(
    model: PreTrainedModel, adapter: Path, lora: LoraConfig, args: TrainingArguments
) -> PeftModel:
    """``model`` wearing the adapter at ``adapter``, trainable, shaped as ``lora`` says (the
    job's hyperparameters, which the API made equal to the parent's)."""
    # As TRL makes a fresh adapter under ZeRO-3: in the base model's dtype, not upcast to
    # float32 (ZeRO-3 fails on parameters of mixed dtypes; trl#6089).
    zero3 = args.deepspeed_plugin is not None and args.deepspeed_plugin.zero_stage == 3
    return PeftModel.from_pretrained(
        model, str(adapter), config=lora, is_trainable=True, autocast_adapter_dtype=not zero3
    )


def reference_in_adapter_dtype(model: torch.nn.Module) -> None:
    """Keep TRL's frozen reference copy of the starting adapter (``ref``, made with beta > 0)
    in the dtype of the adapter it copies. TRL adds it with PEFT's float32 upcast, which under
    ZeRO-3 (adapter in bf16, as ``with_starting_adapter`` loads it) mixes dtypes, as trl#6089
    does for a fresh adapter; elsewhere both are already alike and nothing changes."""
    dtypes = {
        name.replace(".default.", ".ref."): param.dtype
        for name, param in model.named_parameters()
        if ".default." in name
    }
    for name, param in model.named_parameters():
        if name in dtypes and param.dtype != dtypes[name]:
            param.data = param.data.to(dtypes[name])


class StartingOptimizerState(TrainerCallback):
    """Before the first step of a fresh run, the optimizer takes the state saved in
    ``optimizer_file`` (Adam's moment estimates and step counts of every parameter); its
    parameter groups, learning rate and weight decay, stay this job's own."""

    def __init__(self, optimizer_file: Path) -> None:
        self.optimizer_file = optimizer_file

    def on_train_begin(
        self,
        args: Any,
        state: TrainerState,
        control: TrainerControl,
        optimizer: torch.optim.Optimizer | None = None,
        **kwargs: Any,
    ) -> None:
        assert optimizer is not None
        load_optimizer_state(optimizer, self.optimizer_file)


def load_optimizer_state(optimizer: torch.optim.Optimizer, optimizer_file: Path) -> None:
    saved = torch.load(optimizer_file, map_location="cpu", weights_only=True)
    groups = optimizer.param_groups
    if [len(group["params"]) for group in saved["param_groups"]] != [
        len(group["params"]) for group in groups
    ]:
        raise UserFacingFailure(
            "init_from_optimizer: the saved optimizer state covers other parameters than "
            "this job trains (a different LoRA shape)"
        )
    params = [param for group in groups for param in group["params"]]
    for index, values in saved["state"].items():
        for name, value in values.items():
            if torch.is_tensor(value) and value.dim() > 0 and value.shape != params[index].shape:
                raise UserFacingFailure(
                    f"init_from_optimizer: the saved {name} of parameter {index} has shape "
                    f"{tuple(value.shape)}, the parameter {tuple(params[index].shape)}"
                )
    # The indices in the state name parameters in the same order: same model, same LoRA shape.
    saved["param_groups"] = optimizer.state_dict()["param_groups"]
    optimizer.load_state_dict(saved)
