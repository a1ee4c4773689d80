"""How the worker launches each engine: the accelerate config of DeepSpeed ZeRO-2/3, and the
engines a worker refuses before starting anything."""

from __future__ import annotations

import importlib.util

import pytest
import yaml

from workers.training import engines
from workers.training.engines import EngineUnavailable, accelerate_config, check_engine_available


@pytest.mark.parametrize(("engine", "stage"), [("deepspeed_zero2", 2), ("deepspeed_zero3", 3)])
def test_deepspeed_config_starts_every_process_and_leaves_cpu_to_the_ranks(
    engine: str, stage: int
) -> None:
    config = yaml.safe_load(accelerate_config(engine, 4))
    assert config["distributed_type"] == "DEEPSPEED"
    assert config["deepspeed_config"]["zero_stage"] == stage
    assert config["num_processes"] == 4 and config["num_machines"] == 1
    # FACTS: use_cpu here makes accelerate start one process, or DeepSpeed refuse the batch.
    assert config["use_cpu"] is False


def test_a_worker_without_deepspeed_refuses_its_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec

    def without_deepspeed(name: str, *args: object) -> object:
        return None if name == "deepspeed" else real_find_spec(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(engines.importlib.util, "find_spec", without_deepspeed)
    with pytest.raises(EngineUnavailable, match="needs DeepSpeed, which is not installed"):
        check_engine_available("deepspeed_zero2")
    check_engine_available("ddp")


def test_engines_the_worker_cannot_launch_are_refused() -> None:
    with pytest.raises(EngineUnavailable, match="'fsdp' is not available"):
        check_engine_available("fsdp")
