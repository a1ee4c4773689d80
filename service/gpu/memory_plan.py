"""GPU memory of a job whose completions vLLM generates on the trainer's GPUs (colocated).

Plain arithmetic on a model's ``config.json`` (no torch), so the API can refuse at creation a
job no GPU could hold, and a worker can size vLLM's share of its GPU for the job it starts.

What vLLM does with ``gpu_memory_utilization`` (vLLM V1, ``vllm/v1/worker/gpu_worker.py``): at
start it requires the GPU's free memory to be at least ``total x utilization`` (colocated, the
trainer's model is already loaded then), loads its weights, profiles one forward pass, and
makes its KV cache of what is left of ``total x utilization`` after the weights, that
activation peak and the memory outside torch's allocator (CUDA graphs, NCCL). It refuses to
start when that KV cache cannot hold one sequence of ``max_model_len`` tokens. The share is
held for the whole run; the trainer lives in the rest of the GPU.

What TRL 1.16 asks of vLLM in colocate mode (``trl/generation/vllm_generation.py``):
``LLM(tensor_parallel_size, gpu_memory_utilization, max_model_len, max_num_seqs = the
completions of a tensor-parallel group's ranks, max_num_batched_tokens=4096,
enable_sleep_mode)``. With tensor parallelism each group of ``tp`` consecutive ranks runs one
engine that holds 1/tp of the weights and KV heads per GPU and generates the group's
completions. With sleep mode the engine drops its weights and KV cache after each generation
(``sleep(level=2)``) and gets them back before the next one (weights re-sent by the trainer).

The trainer's copy of the weights: a whole bf16 copy on each GPU under ``ddp`` and the
DeepSpeed engines (with a LoRA adapter, TRL gathers every parameter of a ZeRO-3 model at once
to merge the adapter before each weight sync, so ZeRO-3 saves nothing at that peak); under
``fsdp`` 1/world of it, plus what FSDP2 gathers whole (the root unit with the embeddings and
output layer, and two decoder layers).

The constants below are estimates, not measurements of this service: each says where it
comes from. Everything is per GPU.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

GIB = 1024**3
# bf16 weights: the trainer loads bf16 on GPUs (workers/training/grpo.py); vLLM's dtype "auto"
# is the checkpoint's, with float32 checkpoints cast down to 16 bits.
WEIGHT_BYTES = 2
# vLLM's KV cache in the model's 16-bit dtype (kv_cache_dtype "auto"); two tensors, K and V.
KV_BYTES = 2
# vLLM allocates KV cache in blocks of 16 tokens (its default block_size).
KV_BLOCK_TOKENS = 16
# vLLM's memory besides weights and KV cache: the activation peak of its profile run (TRL caps
# it at 4096 batched tokens: a few hundred MiB even for 70B), CUDA graphs (captured by default,
# ~0.3-1 GiB), NCCL buffers with tensor parallelism, the sampler's logits. vLLM's own logs put
# these at ~1 GiB for 7-8B models; 2 GiB leaves a margin.
VLLM_RUNTIME_GIB = 2.0
# The training process's own: the CUDA context (~0.5 GiB), cuBLAS/NCCL workspaces, and what
# the caching allocator fragments.
TRAINER_RUNTIME_GIB = 1.5
# A LoRA parameter in training: float32 weight (PEFT upcasts adapters of 16-bit models) and
# gradient, Adam's two float32 moments: 4 + 4 + 8 bytes.
LORA_STATE_BYTES = 16
# A decoder layer's activations kept for the backward pass, in bytes per token: 16-bit copies
# of ~12 hidden-sized tensors (norm inputs and their float32 upcasts, q/k/v/o, fused
# attention's output, residuals) and 4 MLP-sized ones (gate, up, act(gate), their product):
# after Korthikanti et al. 2022 ("Reducing Activation Recomputation", 34 x hidden bytes per
# token with a 4 x hidden MLP) for a gated MLP, without dropout, with fused attention.
HIDDEN_TENSORS_PER_LAYER = 12
MLP_TENSORS_PER_LAYER = 4
ACTIVATION_BYTES = 2
# Logits of the completion tokens: 16-bit logits, their temperature-scaled copy and their
# gradient (TRL computes log-probabilities one sequence at a time in float32 on top).
LOGIT_BYTES = 6
# Prompt length assumed when a job does not cap it (max_prompt_length unset).
ASSUMED_PROMPT_TOKENS = 512
# The largest share computed for vLLM; the rest is never less than what the trainer needs.
MAX_UTILIZATION = 0.95

_DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}
_LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class UnknownModelShape(ValueError):
    """A config.json without the fields the arithmetic needs (e.g. not a decoder LM)."""


def gib(value_bytes: float) -> float:
    return value_bytes / GIB


# A model's files that say its shape: its config, and (sharded safetensors checkpoints) the
# index whose metadata.total_size is the weights' size in bytes.
CONFIG_FILE = "config.json"
INDEX_FILE = "model.safetensors.index.json"


def checkpoint_bytes(index: Mapping[str, Any] | None) -> int | None:
    """The weights' size a safetensors index states (None: no index, or it states none)."""
    metadata = index.get("metadata") if index else None
    size = metadata.get("total_size") if isinstance(metadata, Mapping) else None
    return int(size) if isinstance(size, int | float) and size > 0 else None


@dataclass(frozen=True)
class ModelShape:
    """What a decoder-only transformer's memory follows, read from its config.json."""

    layers: int
    hidden_size: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    # The MLP width a token goes through: intermediate_size, or for a mixture of experts the
    # experts it is routed to (and any shared expert).
    mlp_width: int
    vocab_size: int
    parameters: int
    # max_position_embeddings: vLLM's max_model_len when a job does not set one.
    context_length: int | None = None
    # One decoder layer, and the embeddings with the output layer: what FSDP gathers whole.
    layer_parameters: int = 0
    embedding_parameters: int = 0

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any], *, checkpoint_bytes: int | None = None
    ) -> ModelShape:
        """``checkpoint_bytes``: the safetensors index's ``metadata.total_size``; the weights'
        size then comes from it (in the config's dtype), else it is counted from the shape."""
        nested = config.get("text_config")
        text: Mapping[str, Any] = nested if isinstance(nested, Mapping) else config
        layers = _field(text, "num_hidden_layers", "n_layer", "num_layers")
        hidden = _field(text, "hidden_size", "n_embd", "d_model")
        heads = _field(text, "num_attention_heads", "n_head")
        kv_heads = _optional(text, "num_key_value_heads") or heads
        head_dim = _optional(text, "head_dim") or hidden // heads
        vocab = _field(text, "vocab_size")
        intermediate = _optional(text, "intermediate_size", "ffn_dim", "n_inner") or 4 * hidden
        experts = _optional(text, "num_local_experts", "num_experts", "n_routed_experts")
        if experts:
            expert_width = _optional(text, "moe_intermediate_size") or intermediate
            shared = _optional(text, "shared_expert_intermediate_size") or (
                (_optional(text, "n_shared_experts") or 0) * expert_width
            )
            routed = _optional(text, "num_experts_per_tok") or 2
            mlp_width = routed * expert_width + shared
            mlp_parameters = 3 * hidden * (experts * expert_width + shared) + hidden * experts
        else:
            mlp_width = intermediate
            mlp_parameters = 3 * hidden * intermediate
        attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
        tied = bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))
        layer = attention + mlp_parameters + 2 * hidden
        embeddings = vocab * hidden * (1 if tied else 2)
        counted = layers * layer + embeddings + hidden
        parameters = counted
        if checkpoint_bytes and "quantization_config" not in config:
            dtype = config.get("torch_dtype") or config.get("dtype") or text.get("torch_dtype")
            parameters = checkpoint_bytes // _DTYPE_BYTES.get(str(dtype), WEIGHT_BYTES)
        context = _optional(text, "max_position_embeddings", "n_positions", "max_sequence_length")
        return cls(
            layers=layers,
            hidden_size=hidden,
            attention_heads=heads,
            kv_heads=kv_heads,
            head_dim=head_dim,
            mlp_width=mlp_width,
            vocab_size=vocab,
            parameters=parameters,
            context_length=context,
            layer_parameters=layer,
            embedding_parameters=embeddings,
        )

    def weight_bytes(self) -> int:
        return self.parameters * WEIGHT_BYTES

    def kv_bytes_per_token(self, tensor_parallel_size: int = 1) -> int:
        """K and V of one token on one GPU; with more GPUs than KV heads vLLM replicates
        them, one head per GPU."""
        heads = math.ceil(self.kv_heads / tensor_parallel_size)
        return 2 * self.layers * heads * self.head_dim * KV_BYTES

    def lora_parameters(self, rank: int, target_modules: Sequence[str] | str) -> int:
        """Parameters of a LoRA adapter of ``rank`` on ``target_modules`` (names of the
        Llama/Qwen layout; "all-linear" and unknown names count every linear layer)."""
        hidden, attention = self.hidden_size, self.attention_heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        sizes = {
            "q_proj": hidden + attention,
            "k_proj": hidden + kv,
            "v_proj": hidden + kv,
            "o_proj": attention + hidden,
            "gate_proj": hidden + self.mlp_width,
            "up_proj": hidden + self.mlp_width,
            "down_proj": self.mlp_width + hidden,
        }
        names = list(_LORA_MODULES) if isinstance(target_modules, str) else list(target_modules)
        if any(name not in sizes for name in names):
            names = list(_LORA_MODULES)
        return self.layers * rank * sum(sizes[name] for name in set(names))


@dataclass(frozen=True)
class JobMemory:
    """What of a job decides its GPU memory."""

    completions_per_step: int
    prompt_tokens: int
    completion_tokens: int
    micro_batch_size: int
    lora_rank: int = 16
    lora_target_modules: Sequence[str] | str = "all-linear"
    activation_checkpointing: bool = True
    # vLLM's context length; None: the model's (config max_position_embeddings).
    max_model_len: int | None = None
    num_devices: int = 1
    num_nodes: int = 1
    engine: str = "ddp"
    tensor_parallel_size: int = 1
    sleep_mode: bool = False
    # The job's own vllm_gpu_memory_utilization; None: computed.
    utilization: float | None = None
    # Whether prompt_tokens is the job's cap or ASSUMED_PROMPT_TOKENS (for messages).
    prompts_capped: bool = True
    # The job's reward models' weights: every rank keeps them on its device beside the
    # trainer (workers.training.reward_models), for the whole run.
    reward_model_bytes: int = 0

    @classmethod
    def from_hyperparameters(
        cls,
        hp: Any,
        *,
        num_devices: int = 1,
        num_nodes: int = 1,
        engine: str = "ddp",
        configured_max_model_len: int | None = None,
    ) -> JobMemory:
        """From a job's Hyperparameters; ``configured_max_model_len``: the worker's
        RFT_VLLM_MAX_MODEL_LENGTH, which a job's own vllm_max_model_length overrides."""
        checkpointing = hp.activation_checkpointing
        return cls(
            completions_per_step=hp.completions_per_step,
            prompt_tokens=hp.max_prompt_length or ASSUMED_PROMPT_TOKENS,
            completion_tokens=hp.max_completion_length,
            micro_batch_size=hp.resolved_micro_batch_size,
            lora_rank=hp.lora_rank,
            lora_target_modules=hp.lora_target_modules,
            # "auto" is on with CUDA, and this arithmetic is for CUDA GPUs.
            activation_checkpointing=True if checkpointing == "auto" else bool(checkpointing),
            max_model_len=vllm_max_model_length(hp, configured_max_model_len),
            num_devices=num_devices,
            num_nodes=num_nodes,
            engine=engine,
            tensor_parallel_size=hp.vllm_tensor_parallel_size,
            sleep_mode=hp.vllm_sleep_mode,
            utilization=hp.vllm_gpu_memory_utilization,
            prompts_capped=hp.max_prompt_length is not None,
        )

    @property
    def world_size(self) -> int:
        return self.num_devices * self.num_nodes


def vllm_max_model_length(hp: Any, configured: int | None = None) -> int | None:
    """vLLM's context for a job: its vllm_max_model_length, else the worker's setting, else
    max_prompt_length + max_completion_length when prompts are capped, else None (the
    model's own context)."""
    if hp.vllm_max_model_length is not None:
        return int(hp.vllm_max_model_length)
    if configured is not None:
        return configured
    if hp.max_prompt_length is not None:
        return int(hp.max_prompt_length + hp.max_completion_length)
    return None


@dataclass(frozen=True)
class MemoryPlan:
    """A job's memory on one GPU of ``device_gib``, and vLLM's share of it (GiB throughout)."""

    device_gib: float
    vllm_weights_gib: float
    kv_gib: float
    kv_tokens: int  # tokens the KV cache is sized for, per engine
    vllm_runtime_gib: float
    trainer_weights_gib: float
    lora_gib: float
    activations_gib: float
    trainer_runtime_gib: float
    sleep_mode: bool
    utilization: float | None  # vLLM's gpu_memory_utilization; None when the job cannot fit
    problem: str | None = None
    reward_models_gib: float = 0.0

    @property
    def fits(self) -> bool:
        return self.problem is None

    @property
    def vllm_gib(self) -> float:
        """What vLLM needs: weights, KV cache for the step, runtime."""
        return self.vllm_weights_gib + self.kv_gib + self.vllm_runtime_gib

    @property
    def trainer_static_gib(self) -> float:
        return (
            self.trainer_weights_gib
            + self.lora_gib
            + self.trainer_runtime_gib
            + self.reward_models_gib
        )

    @property
    def trainer_gib(self) -> float:
        return self.trainer_static_gib + self.activations_gib

    @property
    def total_gib(self) -> float:
        """The peak: with sleep mode vLLM's weights and KV cache are gone while the trainer
        steps, so the peak is the larger of generation and training."""
        if self.sleep_mode:
            return self.trainer_static_gib + max(
                self.vllm_gib, self.activations_gib + self.vllm_runtime_gib
            )
        return self.trainer_gib + self.vllm_gib

    def arithmetic(self) -> str:
        """The sum, for messages and logs."""
        parts = (
            f"weights {self.vllm_weights_gib:.1f} GiB + KV {self.kv_gib:.1f} GiB + vLLM runtime "
            f"{self.vllm_runtime_gib:.1f} GiB"
        )
        trainer = (
            f"(its weights {self.trainer_weights_gib:.1f} + LoRA and Adam {self.lora_gib:.1f} + "
            f"activations {self.activations_gib:.1f} + CUDA {self.trainer_runtime_gib:.1f}"
            + (f" + reward models {self.reward_models_gib:.1f}" if self.reward_models_gib else "")
            + ")"
        )
        if self.sleep_mode:
            return (
                f"trainer {self.trainer_static_gib:.1f} GiB {trainer} + the larger of vLLM "
                f"({parts}) and the trainer's activations with vLLM asleep "
                f"({self.activations_gib + self.vllm_runtime_gib:.1f} GiB) = "
                f"{self.total_gib:.1f} GiB"
            )
        return f"{parts} + trainer {self.trainer_gib:.1f} GiB {trainer} = {self.total_gib:.1f} GiB"


def plan_memory(shape: ModelShape, job: JobMemory, device_gib: float) -> MemoryPlan:
    """The job's memory on each GPU of ``device_gib`` GiB and the gpu_memory_utilization to
    give vLLM: what it needs plus half of what is left (room for longer prompts than assumed;
    the other half is the trainer's margin). With the job's own utilization, only what vLLM
    needs to start is checked (that share must hold the weights and one max_model_len
    sequence, and the trainer's weights must leave it free): the activation estimate is then
    the job's to judge."""
    tp = job.tensor_parallel_size
    world = job.world_size
    per_rank = max(1, math.ceil(job.completions_per_step / world))
    sequences = max(1, math.ceil(job.completions_per_step * tp / world))
    sequence_tokens = _blocks(job.prompt_tokens + job.completion_tokens)
    longest = _blocks(job.max_model_len or shape.context_length or sequence_tokens)
    kv_tokens = max(sequences * sequence_tokens, longest)
    micro = min(job.micro_batch_size, per_rank)
    tokens = micro * (job.prompt_tokens + job.completion_tokens)
    layer_bytes = ACTIVATION_BYTES * (
        HIDDEN_TENSORS_PER_LAYER * shape.hidden_size + MLP_TENSORS_PER_LAYER * shape.mlp_width
    )
    if job.activation_checkpointing:
        # Each layer's input is kept; one layer at a time is recomputed in full.
        kept = shape.layers * tokens * shape.hidden_size * ACTIVATION_BYTES + tokens * layer_bytes
    else:
        kept = shape.layers * tokens * layer_bytes
    logits = micro * job.completion_tokens * shape.vocab_size * LOGIT_BYTES
    trainer_weights: float = shape.weight_bytes()
    if job.engine == "fsdp":
        # A shard of everything, and whole what FSDP gathers: the root unit (embeddings and
        # output layer, kept through the step) and two decoder layers (one computing, one
        # prefetched).
        trainer_weights = trainer_weights / world + WEIGHT_BYTES * (
            shape.embedding_parameters + 2 * shape.layer_parameters
        )
    plan = MemoryPlan(
        device_gib=device_gib,
        vllm_weights_gib=gib(shape.weight_bytes() / tp),
        kv_gib=gib(kv_tokens * shape.kv_bytes_per_token(tp)),
        kv_tokens=kv_tokens,
        vllm_runtime_gib=VLLM_RUNTIME_GIB,
        trainer_weights_gib=gib(trainer_weights),
        lora_gib=gib(
            shape.lora_parameters(job.lora_rank, job.lora_target_modules) * LORA_STATE_BYTES
        ),
        activations_gib=gib(kept + logits),
        trainer_runtime_gib=TRAINER_RUNTIME_GIB,
        sleep_mode=job.sleep_mode,
        utilization=None,
        reward_models_gib=gib(job.reward_model_bytes),
    )
    if shape.attention_heads % tp != 0:
        return _refused(
            plan,
            f"vllm_tensor_parallel_size={tp} does not divide the model's "
            f"{shape.attention_heads} attention heads (vLLM splits them evenly over its GPUs)",
        )
    if job.utilization is not None:
        return _check_given_share(plan, job, shape, longest)
    # With sleep mode the trainer's activations and vLLM's share are never there at once.
    beside_vllm = plan.trainer_static_gib + (0.0 if job.sleep_mode else plan.activations_gib)
    spare = device_gib - plan.total_gib
    if spare < 0:
        return _refused(plan, _too_big(plan, job))
    share = plan.vllm_gib + (device_gib - beside_vllm - plan.vllm_gib) / 2
    utilization = min(
        MAX_UTILIZATION,
        max(_round_up(plan.vllm_gib / device_gib), _round_down(share / device_gib)),
    )
    if utilization * device_gib < plan.vllm_gib or beside_vllm + utilization * device_gib > (
        device_gib
    ):
        return _refused(plan, _too_big(plan, job))
    return _with(plan, utilization=utilization)


def _check_given_share(
    plan: MemoryPlan, job: JobMemory, shape: ModelShape, longest: int
) -> MemoryPlan:
    assert job.utilization is not None
    share = job.utilization * plan.device_gib
    minimum = (
        plan.vllm_weights_gib
        + plan.vllm_runtime_gib
        + gib(longest * shape.kv_bytes_per_token(job.tensor_parallel_size))
    )
    if share < minimum:
        return _refused(
            plan,
            f"vllm_gpu_memory_utilization={job.utilization} gives vLLM {share:.1f} GiB of the "
            f"{plan.device_gib:.1f} GiB GPU, less than it needs to start: weights "
            f"{plan.vllm_weights_gib:.1f} GiB + runtime {plan.vllm_runtime_gib:.1f} GiB + the "
            f"KV cache of one {longest}-token sequence (max_model_len) = {minimum:.1f} GiB; "
            "raise it, lower vllm_max_model_length, or use vllm_tensor_parallel_size with "
            "more num_devices",
        )
    # The reward models load before vLLM starts (RewardDispatcher.load_initial).
    taken = plan.trainer_weights_gib + plan.trainer_runtime_gib + plan.reward_models_gib
    if taken + share > plan.device_gib:
        return _refused(
            plan,
            f"vllm_gpu_memory_utilization={job.utilization} asks {share:.1f} GiB of the "
            f"{plan.device_gib:.1f} GiB GPU, and the trainer's weights and CUDA context "
            + ("and the reward models " if plan.reward_models_gib else "")
            + f"already take {taken:.1f} GiB when "
            "vLLM starts: lower it, or use vllm_tensor_parallel_size with more num_devices "
            "(engine 'fsdp' also shards the trainer's weights)",
        )
    return _with(plan, utilization=job.utilization)


def _too_big(plan: MemoryPlan, job: JobMemory) -> str:
    levers = [
        "lower prompts_per_step x num_generations or "
        + ("max_prompt_length" if job.prompts_capped else "set max_prompt_length")
        + "/max_completion_length (KV cache)",
        "lower micro_batch_size (activations)",
    ]
    if not job.sleep_mode:
        levers.append(
            "set vllm_sleep_mode (vLLM frees its weights and KV cache while the trainer steps)"
        )
    if plan.reward_models_gib:
        levers.append("use a smaller reward model (each rank keeps its weights)")
    levers.append(
        "or use vllm_tensor_parallel_size with more num_devices (engine 'fsdp' also shards "
        "the trainer's copy of the weights)"
    )
    assumed = (
        ""
        if job.prompts_capped
        else f" (prompts assumed {ASSUMED_PROMPT_TOKENS} tokens: max_prompt_length is unset)"
    )
    return (
        f"the job does not fit a {plan.device_gib:.1f} GiB GPU with vLLM colocated{assumed}: "
        f"{plan.arithmetic()} > device {plan.device_gib:.1f} GiB; " + ", ".join(levers)
    )


def _refused(plan: MemoryPlan, problem: str) -> MemoryPlan:
    return _with(plan, utilization=None, problem=problem)


def _with(plan: MemoryPlan, **changes: Any) -> MemoryPlan:
    return replace(plan, **changes)


def _blocks(tokens: int) -> int:
    return math.ceil(tokens / KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS


def _round_up(share: float) -> float:
    return math.ceil(round(share * 100, 6)) / 100


def _round_down(share: float) -> float:
    return math.floor(round(share * 100, 6)) / 100


def _optional(config: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        value = config.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _field(config: Mapping[str, Any], *names: str) -> int:
    value = _optional(config, *names)
    if value is None:
        raise UnknownModelShape(f"config.json has no {names[0]}")
    return value
