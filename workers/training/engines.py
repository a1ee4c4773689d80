"""The engines a job's ranks train with, and how each is launched.

'ddp' runs under torchrun (or, for one process, the worker's warm spare). DeepSpeed and FSDP
run under ``accelerate launch`` with a config generated here, one per job. A job over several
machines starts one launcher per machine, all meeting at rank 0's machine (``Rendezvous``).
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass

from workers.failures import EngineUnavailable
from workers.training.cuda import usable_cuda_devices

# How each engine's ranks share the training; DeepSpeed and FSDP go through accelerate launch.
DEEPSPEED_ZERO_STAGES = {"deepspeed_zero2": 2, "deepspeed_zero3": 3}
FSDP_ENGINE = "fsdp"
# The engines launched by ``accelerate launch --config_file`` (accelerate_config).
ACCELERATE_ENGINES = frozenset({*DEEPSPEED_ZERO_STAGES, FSDP_ENGINE})
ACCELERATE_CONFIG = "accelerate.yaml"


@dataclass(frozen=True)
class Rendezvous:
    """Where the launchers of a job over several machines meet: machine 0's address and a
    port free there, this machine's rank among ``num_nodes``."""

    num_nodes: int
    node_rank: int
    master_addr: str
    master_port: int


def check_engine_available(engine: str) -> None:
    """Refuse, before any process starts, an engine this worker cannot run."""
    if engine in DEEPSPEED_ZERO_STAGES and importlib.util.find_spec("deepspeed") is None:
        raise EngineUnavailable(
            f"engine {engine!r} needs DeepSpeed, which is not installed on this worker "
            "(pip install 'rft-service[deepspeed]')"
        )
    if engine == FSDP_ENGINE and usable_cuda_devices() == 0:
        # Through accelerate, FSDP1 refuses a CPU and FSDP2 silently trains as plain DDP
        # (every rank holding the whole model): refused rather than run as something else.
        # Usable GPUs, as torch sees them: a driver's GPUs that torch cannot use train on CPU.
        raise EngineUnavailable(
            "engine 'fsdp' needs CUDA GPUs and this worker has none that torch can use (FSDP "
            "does not run on CPU); use 'ddp', or 'deepspeed_zero2'/'deepspeed_zero3' to shard "
            "on CPU"
        )
    if engine not in ACCELERATE_ENGINES and engine != "ddp":
        raise EngineUnavailable(f"engine {engine!r} is not available on this worker")


def accelerate_config(engine: str, num_processes: int, rendezvous: Rendezvous | None = None) -> str:
    """The ``accelerate launch`` config of a DeepSpeed or FSDP engine (YAML; JSON is YAML).

    ``num_processes`` counts every machine's processes. ``use_cpu: false`` even on CPU: the
    ranks set use_cpu in GRPOConfig themselves (gloo); with use_cpu here accelerate
    starts a single process, or DeepSpeed refuses the batch arithmetic. Loss and reward then
    match DDP's at every step. ``mixed_precision: no`` leaves precision to the ranks too:
    GRPOConfig's bf16 (on when the GPU has it) is what the Trainer's accelerator uses.
    """
    config: dict[str, object] = {
        "compute_environment": "LOCAL_MACHINE",
        **(_fsdp() if engine == FSDP_ENGINE else _deepspeed(engine)),
        "mixed_precision": "no",
        "num_machines": 1,
        "machine_rank": 0,
        "num_processes": num_processes,
        "rdzv_backend": "static",
        "same_network": True,
        "use_cpu": False,
        "downcast_bf16": "no",
    }
    if rendezvous is not None:
        config["num_machines"] = rendezvous.num_nodes
        config["machine_rank"] = rendezvous.node_rank
        config["main_process_ip"] = rendezvous.master_addr
        config["main_process_port"] = rendezvous.master_port
    return json.dumps(config, indent=2)


def _deepspeed(engine: str) -> dict[str, object]:
    return {
        "distributed_type": "DEEPSPEED",
        "deepspeed_config": {
            "zero_stage": DEEPSPEED_ZERO_STAGES[engine],
            "offload_optimizer_device": "none",
            "offload_param_device": "none",
            "zero3_init_flag": False,
            # Several machines: one torchrun-style launcher per machine (ours), not DeepSpeed's
            # own pdsh launcher, which would ssh into the other machines itself.
            "deepspeed_multinode_launcher": "standard",
        },
    }


def _fsdp() -> dict[str, object]:
    """FSDP2 (PyTorch's per-parameter ``fully_shard``), as TRL's own fsdp2.yaml sets it up for
    GRPO with a PEFT adapter (trl/accelerate_configs/fsdp2.yaml, accelerate >= 1.7).

    FSDP2 rather than FSDP1: a LoRA model mixes frozen and trainable weights, which FSDP2 shards
    per parameter as they are (FSDP1 needs use_orig_params and PEFT's own wrap policy for that;
    ``fsdp_use_orig_params`` and ``fsdp_sync_module_states`` do not exist in FSDP2).
    """
    return {
        "distributed_type": "FSDP",
        "fsdp_config": {
            "fsdp_version": 2,
            # One FSDP unit per decoder layer; with no class named, accelerate takes the
            # model's own ``_no_split_modules`` (e.g. Qwen2DecoderLayer), right for any base.
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_reshard_after_forward": True,
            "fsdp_offload_params": False,
            # Every rank starts from rank 0's weights, the LoRA initialisation included: the
            # model is sharded from rank 0's copy (FSDP2 does not broadcast the ranks' own
            # values the way DDP does; seen on a CPU mesh: LoRA A drawn differently on two
            # ranks is rank 0's on both after sharding).
            "fsdp_cpu_ram_efficient_loading": True,
            # The Trainer writes the adapter (save_model, and each checkpoint's
            # adapter_model.safetensors) only from a full state dict: under
            # SHARDED_STATE_DICT the job's adapter folder would stay empty. Checkpoints keep
            # only the adapter's weights and optimizer state (adapter_only).
            "fsdp_state_dict_type": "FULL_STATE_DICT",
            # Activation checkpointing stays the job's ``activation_checkpointing``
            # hyperparameter (the Trainer's, non-reentrant), as under every engine: the
            # Trainer refuses FSDP's own and its own together.
            "fsdp_activation_checkpointing": False,
        },
    }
