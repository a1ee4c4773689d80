"""The engines a job's ranks train with, and how each is launched.

'ddp' runs under torchrun (or, for one process, the worker's warm spare). DeepSpeed (and FSDP)
run under ``accelerate launch`` with a config generated here, one per job. A job over several
machines starts one launcher per machine, all meeting at rank 0's machine (``Rendezvous``).
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path

# How each engine's ranks share the training; DeepSpeed and FSDP go through accelerate launch.
DEEPSPEED_ZERO_STAGES = {"deepspeed_zero2": 2, "deepspeed_zero3": 3}
# The engines launched by ``accelerate launch --config_file`` (accelerate_config).
ACCELERATE_ENGINES = frozenset(DEEPSPEED_ZERO_STAGES)
ACCELERATE_CONFIG = "accelerate.yaml"


class EngineUnavailable(RuntimeError):
    """This worker cannot run the engine a job asks for; the message says why."""


@dataclass(frozen=True)
class Rendezvous:
    """Where the launchers of a job over several machines meet: machine 0's address and a
    port free there, this machine's rank among ``num_nodes``."""

    num_nodes: int
    node_rank: int
    master_addr: str
    master_port: int


def cuda_device_count() -> int:
    """NVIDIA GPUs this process may use, without importing torch (the worker keeps torch out
    of its own process): the driver's list, narrowed by CUDA_VISIBLE_DEVICES when set."""
    gpus = Path("/proc/driver/nvidia/gpus")
    present = len(list(gpus.iterdir())) if gpus.is_dir() else 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return present
    chosen = [device for device in visible.split(",") if device.strip() not in ("", "-1")]
    return min(present, len(chosen))


def check_engine_available(engine: str) -> None:
    """Refuse, before any process starts, an engine this worker cannot run."""
    if engine in DEEPSPEED_ZERO_STAGES and importlib.util.find_spec("deepspeed") is None:
        raise EngineUnavailable(
            f"engine {engine!r} needs DeepSpeed, which is not installed on this worker "
            "(pip install 'rft-service[deepspeed]')"
        )
    if engine not in DEEPSPEED_ZERO_STAGES and engine != "ddp":
        raise EngineUnavailable(f"engine {engine!r} is not available on this worker")


def accelerate_config(engine: str, num_processes: int, rendezvous: Rendezvous | None = None) -> str:
    """The ``accelerate launch`` config of a DeepSpeed engine (YAML; JSON is YAML).

    ``num_processes`` counts every machine's processes. ``use_cpu: false`` even on CPU: the
    ranks set use_cpu in GRPOConfig themselves (gloo); FACTS: with use_cpu here accelerate
    starts a single process, or DeepSpeed refuses the batch arithmetic. Loss and reward then
    match DDP's at every step.
    """
    config: dict[str, object] = {
        "compute_environment": "LOCAL_MACHINE",
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
