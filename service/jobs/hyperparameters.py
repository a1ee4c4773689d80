"""GRPO hyperparameters a job may set. The defaults are for LoRA GRPO on real models.

Where the defaults come from (each field's description says which applies):
- TRL 1.16 ``GRPOConfig`` defaults: num_generations 8, max_completion_length 512, beta 0.0,
  temperature 1.0, top_p 1.0, loss_type "dapo", epsilon 0.2, scale_rewards "group",
  mask_truncated_completions False, max_grad_norm 1.0 (transformers' default).
- TRL's "LoRA Without Regret" guide (docs/source/lora_without_regret.md, after Schulman et al.
  2025): LoRA on all linear layers, a learning rate ~10x full fine-tuning's (1e-5 with LoRA
  against TRL's 1e-6 for full fine-tuning), rank 1-32 is enough for RL, alpha 32, dropout 0,
  cosine schedule, max_grad_norm 1.0.
- Predibase's GRPO config defaults: learning rate 1e-5, warmup_ratio 0.03.
- DAPO (as TRL's docs quote it): the upper clip bound epsilon_high 0.28 ("clip-higher").

A ``preset`` fills the fields the request leaves out with values for a model size; what is
stored and returned is always the resolved values, so a job's record says exactly what ran.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

LossType = Literal["grpo", "dapo", "dr_grpo", "bnpo"]
SchedulerType = Literal["constant", "constant_with_warmup", "linear", "cosine"]
RewardScaling = Literal["group", "batch", "none"]
DeviceSwitch = bool | Literal["auto"]
PresetName = Literal["tiny-cpu", "small", "medium"]
AdapterKind = Literal["lora", "full"]
Quantization = Literal["none", "4bit"]
AttentionImplementation = Literal["sdpa", "eager", "flash_attention_2"]
OptimizerName = Literal["adamw_torch", "adamw_8bit"]
Tracker = Literal["wandb", "mlflow", "tensorboard", "trackio"]

# Like OpenAI's completions API: a few short strings, so matching them costs nothing.
MAX_STOP_SEQUENCES = 4
MAX_STOP_SEQUENCE_CHARS = 64
# micro_batch_size left unset: the largest divisor of the step's completions whose completion
# tokens fit in this budget, so long completions are split into several backward passes.
AUTO_MICRO_BATCH_TOKENS = 8192

PRESETS: dict[str, dict[str, Any]] = {
    # The built-in 148k-parameter model on CPU: it only learns within a few dozen steps with a
    # large learning rate and short completions (measured: docs/measured-facts.md).
    "tiny-cpu": {
        "learning_rate": 2e-2,
        "num_generations": 8,
        "prompts_per_step": 2,
        "max_completion_length": 16,
        "temperature": 1.0,
        "top_p": 1.0,
        "beta": 0.0,
        "loss_type": "dapo",
        "lr_scheduler_type": "constant",
        "warmup_ratio": 0.0,
        "epsilon": 0.2,
        "epsilon_high": 0.2,
    },
    # 0.5B-3B models on one GPU: the defaults below.
    "small": {},
    # 7B-14B models on one 80 GB GPU: activations grow with the hidden size, so the backward
    # pass runs on fewer completions at a time (a memory choice, not from a published recipe).
    "medium": {"micro_batch_size": 4},
}

# What a supervised (method 'sft') job leaves unset gets TRL's SFTConfig defaults.
SFT_DEFAULTS: dict[str, int] = {"batch_size": 8, "max_length": 1024}
# A supervised job's learning rate when neither the request nor its preset gives one: TRL's
# LoRA guide scales full fine-tuning's rate (SFTConfig's 2e-5) by ~10 for LoRA.
SFT_LEARNING_RATE = 2e-4
# The fields that mean something to a supervised job (the rest steer GRPO's sampling, its loss,
# its rewards and its warnings). A job of one method refuses the other's fields when they are
# given (a preset fills only what applies): jobs.schemas.JobCreate.
SFT_FIELDS = frozenset(
    {
        "preset",
        "train_steps",
        "learning_rate",
        "lr_scheduler_type",
        "warmup_ratio",
        "max_grad_norm",
        "lora_rank",
        "lora_alpha",
        "lora_dropout",
        "lora_target_modules",
        "adapter",
        "quantization",
        "attn_implementation",
        "optimizer",
        "bf16",
        "activation_checkpointing",
        "seed",
        "checkpoint_every",
        "report_to",
        "eval_every",
        "eval_max_prompts",
        *SFT_DEFAULTS,
    }
)
SFT_ONLY_FIELDS = frozenset(SFT_DEFAULTS)


# Rollouts may be this many optimizer steps older than the policy that trains on them; past a
# few steps the importance-sampling ratios drift far from 1 and most tokens get clipped
# (docs/async-generation.md).
MAX_STALENESS = 4


class AsyncGeneration(BaseModel):
    """Generation overlapping training: step t+1's rollouts are sampled (by a vLLM engine in
    a process of its own) while step t trains, so they come from a policy up to
    ``max_staleness`` optimizer steps old; the loss corrects for it by importance sampling."""

    model_config = ConfigDict(extra="forbid")

    max_staleness: int = Field(
        1,
        ge=1,
        le=MAX_STALENESS,
        description="Most optimizer steps between the policy that sampled a rollout and the "
        "one that trains on it (1: one step off-policy, the usual async GRPO setting). Also "
        "how many steps' rollouts are generated ahead.",
    )


class Hyperparameters(BaseModel):
    # NaN and Infinity pass `ge` bounds (beta = Infinity did) and cannot be stored as JSON.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    preset: PresetName | None = Field(
        None,
        description="Fill the fields this request leaves out from a preset: 'tiny-cpu' (the "
        "built-in rft-tiny model on CPU), 'small' (0.5B-3B; the defaults), 'medium' "
        "(7B-14B: micro_batch_size 4). Fields you set win.",
    )
    train_steps: int = Field(20, ge=1, le=100_000, description="Optimizer steps to run.")
    learning_rate: float = Field(
        1e-5,
        gt=0,
        le=1.0,
        description="Peak learning rate of the LoRA adapter. 1e-5: TRL's LoRA GRPO recipe "
        "(10x the 1e-6 it uses for full fine-tuning) and Predibase's GRPO default.",
    )
    lr_scheduler_type: SchedulerType = Field(
        "cosine", description="Learning-rate schedule after warmup (TRL's LoRA GRPO recipe)."
    )
    warmup_ratio: float = Field(
        0.03,
        ge=0,
        lt=1,
        description="Share of train_steps spent ramping the learning rate up from 0 "
        "(Predibase's GRPO default).",
    )
    max_grad_norm: float = Field(
        1.0, ge=0, description="Gradient clipping norm; 0 turns clipping off (TRL's default)."
    )
    num_generations: int = Field(
        8,
        ge=2,
        le=256,
        description="Completions sampled per prompt, the GRPO group size (TRL's default).",
    )
    prompts_per_step: int = Field(
        4,
        ge=1,
        le=1024,
        description="Distinct prompts per optimizer step; a step trains on prompts_per_step x "
        "num_generations completions (32 by default: TRL's LoRA guide keeps LoRA batches small).",
    )
    micro_batch_size: int | None = Field(
        None,
        ge=1,
        description="Completions per forward/backward pass. A step still generates all its "
        "completions at once and takes one optimizer step; its backward pass runs in "
        "completions_per_step / micro_batch_size parts. Must divide completions_per_step. "
        f"Unset: the largest divisor with at most {AUTO_MICRO_BATCH_TOKENS} completion tokens "
        "(micro_batch_size x max_completion_length).",
    )
    max_completion_length: int = Field(
        512, ge=1, le=32_768, description="Tokens per completion (TRL's default)."
    )
    max_prompt_length: int | None = Field(
        None, ge=1, description="Truncate prompts to this many tokens (None keeps them whole)."
    )
    stop: list[str] = Field(
        default_factory=list,
        max_length=MAX_STOP_SEQUENCES,
        description="Stop sequences: a completion ends after the token that completes the "
        "first of these strings, which stays in the completion (and in training, like an "
        "end-of-sequence token). Such a completion counts as finished, not truncated.",
    )
    temperature: float = Field(
        1.0, gt=0, le=5.0, description="Sampling temperature (TRL's default: on-policy)."
    )
    top_p: float = Field(1.0, gt=0, le=1.0, description="Nucleus sampling (TRL's default).")
    beta: float = Field(
        0.0,
        ge=0,
        description="KL coefficient; 0 skips the reference model (TRL's default, as in DAPO "
        "and Dr. GRPO).",
    )
    loss_type: LossType = Field(
        "dapo",
        description="How token losses are averaged (TRL's default 'dapo': over the step's "
        "tokens, no length bias). 'bnpo' averages per micro-batch, so it depends on "
        "micro_batch_size.",
    )
    epsilon: float = Field(
        0.2, gt=0, le=1.0, description="Lower clipping range of the policy ratio (TRL's default)."
    )
    epsilon_high: float = Field(
        0.28,
        gt=0,
        le=10.0,
        description="Upper clipping range; at least epsilon. 0.28: DAPO's clip-higher, which "
        "TRL's docs recommend alongside the 'dapo' loss.",
    )
    scale_rewards: RewardScaling = Field(
        "group",
        description="Divide advantages by the reward std of the prompt's group ('group', TRL's "
        "default), of the whole step ('batch'), or not at all ('none', as Dr. GRPO does).",
    )
    mask_truncated_completions: bool = Field(
        False,
        description="Leave completions cut at max_completion_length out of the loss (DAPO "
        "recommends it; TRL's default is off, since a model that never finishes within the "
        "limit would then learn nothing).",
    )
    lora_rank: int = Field(
        16, ge=1, le=1024, description="LoRA rank; TRL's LoRA guide finds 1-32 enough for RL."
    )
    lora_alpha: int = Field(32, ge=1, le=4096, description="LoRA alpha (TRL's LoRA GRPO recipe).")
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="TRL's LoRA GRPO recipe: 0.")
    lora_target_modules: list[str] | Literal["all-linear"] = Field(
        "all-linear",
        description="Which layers get adapters; all linear layers (TRL's LoRA guide: "
        "attention-only LoRA underperforms).",
    )
    adapter: AdapterKind = Field(
        "lora",
        description="'lora': train a LoRA adapter over the frozen base (the lora_* settings). "
        "'full': train every weight of the model (no LoRA): the result is a whole model, "
        "several times the memory (weights, gradients and AdamW's two moments of every "
        "parameter: ~16 bytes a parameter in bf16 + fp32 optimizer state), and with beta > 0 a "
        "second, frozen copy as the KL reference.",
    )
    quantization: Quantization = Field(
        "none",
        description="'4bit': QLoRA, the frozen base loaded in 4-bit NF4 (bitsandbytes) with "
        "bf16 compute: ~1/4 of the base weights' memory, ~20-40% slower steps. CUDA GPUs only "
        "(refused at creation on a deployment without one); LoRA only.",
    )
    attn_implementation: AttentionImplementation = Field(
        "sdpa",
        description="The attention kernel: 'sdpa' (PyTorch's, everywhere), 'eager' (plain "
        "matrix products; slowest, for debugging), 'flash_attention_2' (CUDA with the "
        "flash-attn package installed on the workers: less memory at long sequences).",
    )
    optimizer: OptimizerName = Field(
        "adamw_torch",
        description="'adamw_torch': AdamW with fp32 moments (8 bytes a trained parameter). "
        "'adamw_8bit': bitsandbytes' 8-bit AdamW (2 bytes a trained parameter; matters for "
        "adapter='full'); CUDA GPUs only.",
    )
    bf16: DeviceSwitch = Field(
        "auto", description="Train in bfloat16. 'auto': on where the GPU supports it, off on CPU."
    )
    activation_checkpointing: DeviceSwitch = Field(
        "auto",
        description="Recompute activations in the backward pass instead of keeping them (less "
        "memory, ~30% more compute). 'auto': on with CUDA, off on CPU.",
    )
    seed: int = Field(0, ge=0, le=2**32 - 1, description="NumPy's seed range.")
    reproducible_sampling: bool = Field(
        False,
        description="Sample each completion with noise derived from (seed, step, the "
        "completion's index in the step) instead of each process's random stream, so the same "
        "job on 1 or N devices (num_devices) samples the same completions and trains the same "
        "trajectory (up to float rounding). Same distribution as normal sampling. Costs a hash "
        "over the vocabulary per generated token (~10% of generation time on the tiny CPU "
        "model; bench/README.md). Needs transformers generation: a worker that generates "
        "with vLLM fails such a job at its start.",
    )
    vllm_gpu_memory_utilization: float | None = Field(
        None,
        gt=0,
        le=1,
        description="vLLM colocated on a GPU: its share of each GPU's memory (TRL's "
        "vllm_gpu_memory_utilization), for its weights, KV cache and runtime; the trainer "
        "lives in the rest. null: computed at the job's start from the model's config and the "
        "GPU (what vLLM needs for this job plus half of what is left; docs/deploy/"
        "gpu-sizing.md), else the worker's RFT_VLLM_MEMORY_FRACTION (0.3).",
    )
    vllm_tensor_parallel_size: int = Field(
        1,
        ge=1,
        le=64,
        description="vLLM colocated: GPUs each vLLM engine spans (TRL's "
        "vllm_tensor_parallel_size): each group of this many ranks shares one engine holding "
        "1/N of the weights and KV cache per GPU. Must divide num_devices and the model's "
        "attention heads.",
    )
    vllm_sleep_mode: bool = Field(
        False,
        description="vLLM colocated on a GPU: free vLLM's weights and KV cache while the "
        "trainer steps, and bring them back before each generation (TRL's "
        "vllm_enable_sleep_mode): more memory for training, a slower generation.",
    )
    vllm_max_model_length: int | None = Field(
        None,
        ge=1,
        le=1_048_576,
        description="vLLM's context length in tokens, which its KV cache must hold at least "
        "once (TRL's vllm_max_model_length). null: the worker's RFT_VLLM_MAX_MODEL_LENGTH, "
        "else max_prompt_length + max_completion_length when prompts are capped, else the "
        "model's whole context.",
    )
    async_generation: AsyncGeneration | None = Field(
        None,
        description="Opt-in: generate the next steps' rollouts while the current step trains, "
        'e.g. {"max_staleness": 1}. Needs workers that generate with vLLM; single-device, '
        "single-answer GRPO jobs only (no tools or environments, no reproducible_sampling, "
        "no vllm_sleep_mode or vllm_tensor_parallel_size > 1). Each step records the "
        "staleness of its rollouts and the importance-sampling ratios "
        "(docs/async-generation.md). null: generation and training alternate.",
    )
    max_turns: int = Field(
        8,
        ge=1,
        le=64,
        description="Agent jobs (tools or an environment): most tool-calling rounds in one "
        "rollout (TRL's max_tool_calling_iterations). A rollout that reaches it ends there and "
        "is marked truncated; tokens still count against max_completion_length.",
    )
    tool_timeout_s: float = Field(
        30.0,
        gt=0,
        le=600,
        description="Agent jobs: wall limit of one tool call (and of one environment reset or "
        "get_reward). A call that runs past it returns an error to the model; the job goes on.",
    )
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
    no_signal_threshold: float = Field(
        0.9,
        gt=0,
        le=1,
        description="A step has no learning signal when at least this share of its groups got "
        "equal rewards for every completion (frac_reward_zero_std); warning_patience such "
        "steps in a row raise a 'no_signal' warning.",
    )
    warning_patience: int = Field(
        3,
        ge=1,
        description="Consecutive steps a warning's condition must hold (no signal, a function "
        "whose scores stopped varying, collapsed or truncated completions) before the job "
        "warns; once per episode.",
    )
    fail_on_no_signal: bool = Field(
        False,
        description="Fail the job, instead of ending it with a warning, when the run as a "
        "whole learned from (almost) nothing (its mean frac_reward_zero_std reached "
        "no_signal_threshold).",
    )
    report_to: list[Tracker] = Field(
        default_factory=list,
        max_length=4,
        description="Experiment trackers the worker also reports to (TRL's report_to): "
        "'wandb', 'mlflow', 'tensorboard', 'trackio'. Their settings and credentials are "
        "read from the worker's environment and the job's secrets (docs/deploy/"
        "monitoring.md).",
    )

    batch_size: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="method 'sft' only: examples per optimizer step, split evenly over the "
        f"job's devices (null: {SFT_DEFAULTS['batch_size']}, TRL's per-device default). GRPO's "
        "step is prompts_per_step x num_generations completions.",
    )
    max_length: int | None = Field(
        None,
        ge=1,
        le=1_048_576,
        description="method 'sft' only: tokens per example; longer ones are cut at the end "
        f"(null: {SFT_DEFAULTS['max_length']}, TRL's default).",
    )

    eval_every: int | None = Field(
        None,
        ge=1,
        description="With a validation set (the job's validation_dataset_id or "
        "validation_split): evaluate every N steps, and always after the last step. null: "
        "only after the last step.",
    )
    eval_samples: int = Field(
        1,
        ge=1,
        le=64,
        description="Completions sampled per validation prompt when eval_temperature > 0 "
        "(greedy decoding writes one).",
    )
    eval_max_prompts: int = Field(
        64,
        ge=1,
        le=10_000,
        description="Validation prompts evaluated each time (the first N rows of the set).",
    )
    eval_temperature: float = Field(
        0.0,
        ge=0,
        le=10.0,
        description="Sampling temperature of validation completions; 0 is greedy (the same "
        "answer each time, so evaluations compare the adapter, not the dice).",
    )
    keep_best: int = Field(
        1,
        ge=0,
        le=100,
        description="Mark this many checkpoints, those with the best validation reward, as "
        "best (is_best on the job's checkpoints). Every evaluated step is checkpointed.",
    )

    @model_validator(mode="before")
    @classmethod
    def _fill_from_preset(cls, data: Any) -> Any:
        # isinstance first: `in` hashes the value, and a client may send an object (a 500).
        if (
            isinstance(data, dict)
            and isinstance(data.get("preset"), str)
            and data["preset"] in PRESETS
        ):
            return {**PRESETS[data["preset"]], **data}
        return data

    @field_validator("stop")
    @classmethod
    def _check_stop(cls, stop: list[str]) -> list[str]:
        for sequence in stop:
            if not sequence:
                raise ValueError("stop: an empty string would end every completion at once")
            if len(sequence) > MAX_STOP_SEQUENCE_CHARS:
                raise ValueError(
                    f"stop: {sequence[:20]!r}... is longer than {MAX_STOP_SEQUENCE_CHARS} "
                    "characters"
                )
        if len(set(stop)) != len(stop):
            raise ValueError("stop: the same string is given twice")
        return stop

    @field_validator("report_to")
    @classmethod
    def _check_report_to(cls, trackers: list[str]) -> list[str]:
        if len(set(trackers)) != len(trackers):
            raise ValueError("report_to: the same tracker is given twice")
        return trackers

    def cuda_only_options(self) -> list[str]:
        """The options set here that only a CUDA GPU can run, as a user would name them."""
        wanted = []
        if self.quantization == "4bit":
            wanted.append("quantization '4bit' (QLoRA: bitsandbytes)")
        if self.optimizer == "adamw_8bit":
            wanted.append("optimizer 'adamw_8bit' (bitsandbytes)")
        if self.attn_implementation == "flash_attention_2":
            wanted.append("attn_implementation 'flash_attention_2'")
        return wanted

    @model_validator(mode="after")
    def _check_combinations(self) -> Hyperparameters:
        if self.adapter == "full" and self.quantization != "none":
            raise ValueError(
                "quantization '4bit' (QLoRA) trains a LoRA adapter over a frozen 4-bit base: "
                "it cannot be combined with adapter 'full' (4-bit weights cannot be trained)"
            )
        if isinstance(self.lora_target_modules, list):
            if not self.lora_target_modules:
                raise ValueError("lora_target_modules: give at least one module or 'all-linear'")
            if "lm_head" in self.lora_target_modules:
                raise ValueError("lora_target_modules: TRL does not train LoRA on lm_head")
        if self.epsilon_high < self.epsilon:
            raise ValueError(
                f"epsilon_high ({self.epsilon_high}) must be at least epsilon ({self.epsilon}): "
                "the upper clipping range cannot be narrower than the lower one"
            )
        if self.lr_scheduler_type == "constant" and "warmup_ratio" not in self.model_fields_set:
            # Asking for a constant rate means no ramp, unless a warmup was asked for too.
            self.warmup_ratio = 0.0
        if self.lr_scheduler_type == "constant" and self.warmup_ratio > 0:
            raise ValueError(
                "lr_scheduler_type 'constant' has no warmup: use 'constant_with_warmup', or "
                "set warmup_ratio to 0"
            )
        if self.vllm_max_model_length is not None:
            needed = (self.max_prompt_length or 1) + self.max_completion_length
            if self.vllm_max_model_length < needed:
                raise ValueError(
                    f"vllm_max_model_length ({self.vllm_max_model_length}) leaves no room for "
                    f"a prompt of max_prompt_length ({self.max_prompt_length or 1}) and "
                    f"max_completion_length ({self.max_completion_length}) tokens: make it at "
                    f"least {needed}"
                )
        completions = self.completions_per_step
        if self.micro_batch_size is None:
            self.micro_batch_size = auto_micro_batch_size(completions, self.max_completion_length)
        elif completions % self.micro_batch_size != 0:
            raise ValueError(
                f"micro_batch_size ({self.micro_batch_size}) must divide the completions of a "
                f"step ({completions} = prompts_per_step {self.prompts_per_step} x "
                f"num_generations {self.num_generations}); leave it unset to have one chosen"
            )
        return self

    @staticmethod
    def sft_request(given: dict[str, Any]) -> dict[str, Any]:
        """A supervised job's hyperparameters as sent, with SFT's learning rate unless the
        request or its preset sets one (GRPO's default is an RL rate)."""
        preset = given.get("preset")
        preset_values = PRESETS.get(preset, {}) if isinstance(preset, str) else {}
        if "learning_rate" in given or "learning_rate" in preset_values:
            return given
        return {**given, "learning_rate": SFT_LEARNING_RATE}

    def with_sft_defaults(self) -> Hyperparameters:
        """For a supervised job: batch_size and max_length resolved, as its record keeps them."""
        unset = {name: value for name, value in SFT_DEFAULTS.items() if getattr(self, name) is None}
        return self.model_copy(update=unset) if unset else self

    @classmethod
    def from_stored(cls, stored: dict[str, Any]) -> Hyperparameters:
        """A job's stored hyperparameters. Jobs created before the real-model defaults (their
        record has no "preset" key) keep the settings they were created under: constant rate,
        no warmup, symmetric clipping, each step one micro-batch without checkpointing."""
        if "preset" in stored:
            return cls.model_validate(stored)
        completions = int(stored.get("prompts_per_step", 2)) * int(stored.get("num_generations", 8))
        legacy = {
            "lr_scheduler_type": "constant",
            "warmup_ratio": 0.0,
            "epsilon_high": 0.2,
            "micro_batch_size": completions,
            "activation_checkpointing": False,
        }
        return cls.model_validate({**legacy, **stored})

    @property
    def completions_per_step(self) -> int:
        return self.prompts_per_step * self.num_generations

    @property
    def gradient_accumulation_steps(self) -> int:
        """Backward passes per optimizer step (micro-batches of one generation batch)."""
        return self.completions_per_step // self.resolved_micro_batch_size

    @property
    def resolved_micro_batch_size(self) -> int:
        # Always set after validation; the property keeps the type checker sure of it.
        if self.micro_batch_size is None:
            return auto_micro_batch_size(self.completions_per_step, self.max_completion_length)
        return self.micro_batch_size


def auto_micro_batch_size(completions_per_step: int, max_completion_length: int) -> int:
    """The largest divisor of ``completions_per_step`` within AUTO_MICRO_BATCH_TOKENS."""
    fits = max(1, AUTO_MICRO_BATCH_TOKENS // max_completion_length)
    return max(
        d for d in range(1, completions_per_step + 1) if completions_per_step % d == 0 and d <= fits
    )
