"""How the worker launches each engine: the accelerate config of DeepSpeed ZeRO-2/3 and FSDP,
and the engines a worker refuses before starting anything."""

from __future__ import annotations

import importlib.util

import pytest
import yaml

from workers.training import engines
from workers.training.engines import (
    ACCELERATE_ENGINES,
    EngineUnavailable,
    Rendezvous,
    accelerate_config,
    check_engine_available,
)


@pytest.mark.parametrize(("engine", "stage"), [("deepspeed_zero2", 2), ("deepspeed_zero3", 3)])
def test_deepspeed_config_starts_every_process_and_leaves_cpu_to_the_ranks(
    engine: str, stage: int
) -> None:
    config = yaml.safe_load(accelerate_config(engine, 4))
    assert config["distributed_type"] == "DEEPSPEED"
    assert config["deepspeed_config"]["zero_stage"] == stage
    assert config["num_processes"] == 4 and config["num_machines"] == 1
    # use_cpu here makes accelerate start one process, or DeepSpeed refuse the batch.
    assert config["use_cpu"] is False


def test_a_worker_without_deepspeed_refuses_its_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec

    def without_deepspeed(name: str, *args: object) -> object:
        return None if name == "deepspeed" else real_find_spec(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(engines.importlib.util, "find_spec", without_deepspeed)
    with pytest.raises(EngineUnavailable, match="needs DeepSpeed, which is not installed"):
        check_engine_available("deepspeed_zero2")
    check_engine_available("ddp")


def test_fsdp_config_shards_with_fsdp2_and_saves_the_adapter_whole() -> None:
    config = yaml.safe_load(accelerate_config("fsdp", 4))
    assert "fsdp" in ACCELERATE_ENGINES
    assert config["distributed_type"] == "FSDP"
    assert "deepspeed_config" not in config
    fsdp = config["fsdp_config"]
    assert fsdp["fsdp_version"] == 2
    # No class named: accelerate wraps each of the model's _no_split_modules (decoder layers).
    assert fsdp["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    assert "fsdp_transformer_layer_cls_to_wrap" not in fsdp
    # SHARDED_STATE_DICT would leave the job's adapter folder empty (Trainer.save_model).
    assert fsdp["fsdp_state_dict_type"] == "FULL_STATE_DICT"
    # Every rank starts from rank 0's weights (and LoRA initialisation).
    assert fsdp["fsdp_cpu_ram_efficient_loading"] is True
    # The Trainer refuses FSDP's activation checkpointing together with its own (grpo.py's).
    assert fsdp["fsdp_activation_checkpointing"] is False
    assert config["num_processes"] == 4 and config["num_machines"] == 1
    assert config["use_cpu"] is False and config["mixed_precision"] == "no"


@pytest.mark.parametrize("engine", sorted(ACCELERATE_ENGINES))
def test_every_accelerate_engine_meets_the_other_machines_at_the_rendezvous(engine: str) -> None:
    rendezvous = Rendezvous(num_nodes=2, node_rank=1, master_addr="10.0.0.5", master_port=29511)
    config = yaml.safe_load(accelerate_config(engine, 8, rendezvous))
    assert (config["num_machines"], config["machine_rank"], config["num_processes"]) == (2, 1, 8)
    assert (config["main_process_ip"], config["main_process_port"]) == ("10.0.0.5", 29511)
    assert config["same_network"] is True and config["rdzv_backend"] == "static"


def test_fsdp_is_refused_on_a_worker_without_cuda_devices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # On CPU, FSDP through accelerate either refuses or silently trains as plain DDP.
    # GPUs torch can use (workers.training.cuda): tests/unit/test_cuda_probe.py.
    monkeypatch.setattr(engines, "usable_cuda_devices", lambda: 0)
    with pytest.raises(EngineUnavailable, match="'fsdp' needs CUDA GPUs and this worker has none"):
        check_engine_available("fsdp")
    monkeypatch.setattr(engines, "usable_cuda_devices", lambda: 2)
    check_engine_available("fsdp")


def test_engines_the_worker_cannot_launch_are_refused() -> None:
    with pytest.raises(EngineUnavailable, match="'horovod' is not available"):
        check_engine_available("horovod")
