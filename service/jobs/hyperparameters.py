"""GRPO hyperparameters a job may set. The defaults make the built-in tiny model learn on CPU."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

LossType = Literal["grpo", "dapo", "dr_grpo", "bnpo"]


class Hyperparameters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    train_steps: int = Field(20, ge=1, le=100_000, description="Optimizer steps to run.")
    learning_rate: float = Field(2e-2, gt=0, le=1.0, description="LoRA learning rate (constant).")
    num_generations: int = Field(
        8, ge=2, le=256, description="Completions sampled per prompt (the GRPO group size)."
    )
    prompts_per_step: int = Field(2, ge=1, le=1024, description="Distinct prompts per step.")
    max_completion_length: int = Field(16, ge=1, le=32_768, description="Tokens per completion.")
    max_prompt_length: int | None = Field(
        None, ge=1, description="Truncate prompts to this many tokens (None keeps them whole)."
    )
    temperature: float = Field(1.0, gt=0, le=5.0)
    top_p: float = Field(1.0, gt=0, le=1.0)
    beta: float = Field(0.0, ge=0, description="KL coefficient; 0 skips the reference model.")
    loss_type: LossType = "dapo"
    lora_rank: int = Field(16, ge=1, le=1024)
    lora_alpha: int = Field(32, ge=1, le=4096)
    lora_dropout: float = Field(0.0, ge=0, lt=1)
    lora_target_modules: list[str] | Literal["all-linear"] = "all-linear"
    seed: int = Field(0, ge=0)
    reward_error_rate_limit: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Circuit breaker: the job fails when one reward function fails on more "
        "than this share of a step's samples for reward_error_patience consecutive steps.",
    )
    reward_error_patience: int = Field(3, ge=1, description="See reward_error_rate_limit.")
    checkpoint_every: int = Field(
        10, ge=1, description="Save the adapter (and trainer state) every N steps."
    )

    @model_validator(mode="after")
    def _check_lora(self) -> Hyperparameters:
        if isinstance(self.lora_target_modules, list):
            if not self.lora_target_modules:
                raise ValueError("lora_target_modules: give at least one module or 'all-linear'")
            if "lm_head" in self.lora_target_modules:
                raise ValueError("lora_target_modules: TRL does not train LoRA on lm_head")
        return self

    @property
    def completions_per_step(self) -> int:
        return self.prompts_per_step * self.num_generations
