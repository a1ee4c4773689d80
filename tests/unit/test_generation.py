"""The worker's choice of generation backend and the GRPOConfig fields it sets."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from pydantic import ValidationError

from service.gpu.memory_plan import JobMemory, ModelShape, plan_memory
from service.jobs.hyperparameters import Hyperparameters
from service.settings import Settings
from tests.tiny import TINY_HYPERPARAMETERS
from tests.unit.test_memory_plan import QWEN25_7B
from workers.training import generation
from workers.training.generation import (
    Generation,
    GenerationSetupError,
    choose_generation,
    vllm_unusable_reason,
)


def settings(**values: Any) -> Settings:
    return Settings.model_validate(values)


@pytest.fixture
def vllm_usable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend vLLM can run here (the main environment has no vllm)."""
    monkeypatch.setattr(generation, "vllm_unusable_reason", lambda device: None)


@pytest.fixture
def vllm_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        generation, "vllm_unusable_reason", lambda device: "vllm is not installed: install it"
    )


def hyperparameters(**values: Any) -> Hyperparameters:
    return Hyperparameters.model_validate({**TINY_HYPERPARAMETERS, **values})


def test_transformers_when_asked_even_where_vllm_runs(vllm_usable: None) -> None:
    chosen = choose_generation(settings(generation_backend="transformers"))
    assert not chosen.uses_vllm
    assert chosen.grpo_arguments(hyperparameters()) == {"use_vllm": False}
    assert chosen.describe().startswith("transformers (")


def test_auto_falls_back_to_transformers_without_vllm_saying_why(vllm_missing: None) -> None:
    chosen = choose_generation(settings())
    assert chosen.backend == "transformers"
    assert chosen.why_not_vllm == "vllm is not installed: install it"


def test_a_broken_vllm_install_is_a_reason_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(generation.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setitem(sys.modules, "vllm.platforms", None)  # import raises ImportError
    reason = vllm_unusable_reason("cpu")
    assert reason is not None and reason.startswith("vllm is installed but cannot be imported")
    assert choose_generation(settings()).backend == "transformers"


def test_auto_picks_vllm_colocate_where_it_runs(vllm_usable: None) -> None:
    chosen = choose_generation(settings())
    assert chosen.backend == "vllm" and chosen.mode == "colocate"
    # The default share of memory depends on the device: RAM on CPU, where 0.9 fails.
    assert chosen.memory_fraction == generation.DEFAULT_MEMORY_FRACTION[chosen.device]
    assert chosen.describe() == f"vllm (colocate, {chosen.device})"


def test_vllm_asked_for_but_missing_fails_saying_what_to_install(vllm_missing: None) -> None:
    with pytest.raises(GenerationSetupError, match="RFT_GENERATION_BACKEND=vllm, but vllm is"):
        choose_generation(settings(generation_backend="vllm"))


def test_the_real_check_names_the_extra_when_vllm_is_absent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # vllm absent whether or not this environment has it (.venv has not, .venv-vllm has).
    find_spec = generation.importlib.util.find_spec
    monkeypatch.setattr(
        generation.importlib.util,
        "find_spec",
        lambda name, *args: None if name == "vllm" else find_spec(name, *args),
    )
    reason = vllm_unusable_reason("cpu")
    assert reason is not None and "rft-service[vllm]" in reason and "setup_vllm.sh" in reason


def test_colocate_arguments(vllm_usable: None) -> None:
    chosen = choose_generation(settings(generation_backend="vllm", vllm_memory_fraction=0.05))
    arguments = chosen.grpo_arguments(hyperparameters(max_prompt_length=48))
    assert arguments == {
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_gpu_memory_utilization": 0.05,
        "vllm_tensor_parallel_size": 1,
        "vllm_enable_sleep_mode": False,
        # No explicit length: prompt cap + completion length.
        "vllm_max_model_length": 48 + TINY_HYPERPARAMETERS["max_completion_length"],
    }
    explicit = choose_generation(settings(generation_backend="vllm", vllm_max_model_length=256))
    assert explicit.grpo_arguments(hyperparameters())["vllm_max_model_length"] == 256


def test_a_jobs_vllm_hyperparameters_win(vllm_usable: None) -> None:
    gpu = Generation(
        backend="vllm", device="cuda", mode="colocate", memory_fraction=0.3, max_model_length=256
    )
    hp = hyperparameters(
        vllm_gpu_memory_utilization=0.6,
        vllm_tensor_parallel_size=2,
        vllm_sleep_mode=True,
        vllm_max_model_length=4096,
    )
    sized = plan_memory(ModelShape.from_config(QWEN25_7B), JobMemory(32, 512, 512, 16), 80.0)
    arguments = gpu.grpo_arguments(hp, sized)
    assert arguments["vllm_gpu_memory_utilization"] == 0.6  # the job's own, over the plan's
    assert arguments["vllm_tensor_parallel_size"] == 2
    assert arguments["vllm_enable_sleep_mode"] is True
    assert arguments["vllm_max_model_length"] == 4096  # over RFT_VLLM_MAX_MODEL_LENGTH
    # Unset: the share sized for the job and GPU, over RFT_VLLM_MEMORY_FRACTION.
    assert gpu.grpo_arguments(hyperparameters(), sized)["vllm_gpu_memory_utilization"] == 0.42
    assert gpu.grpo_arguments(hyperparameters())["vllm_gpu_memory_utilization"] == 0.3
    # Sleep mode needs CUDA's memory pools: vLLM's CPU build has none.
    cpu = Generation(backend="vllm", device="cpu", mode="colocate", memory_fraction=0.1)
    assert cpu.grpo_arguments(hp)["vllm_enable_sleep_mode"] is False


def test_server_mode_is_refused_on_cpu_naming_nccl(
    vllm_usable: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(generation, "_trainer_device", lambda: "cpu")
    with pytest.raises(GenerationSetupError, match="NCCL"):
        choose_generation(
            settings(vllm_mode="server", vllm_server_host="10.0.0.2", vllm_server_port=8000)
        )


def test_server_mode_needs_host_and_port(
    vllm_usable: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(generation, "_trainer_device", lambda: "cuda")
    with pytest.raises(GenerationSetupError) as refused:
        choose_generation(settings(vllm_mode="server", vllm_server_host="10.0.0.2"))
    assert "RFT_VLLM_SERVER_PORT" in str(refused.value)
    assert "RFT_VLLM_SERVER_HOST" not in str(refused.value)
    with pytest.raises(GenerationSetupError, match="RFT_VLLM_SERVER_HOST and RFT_VLLM_SERVER_PORT"):
        choose_generation(settings(vllm_mode="server"))


def test_server_mode_arguments(vllm_usable: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(generation, "_trainer_device", lambda: "cuda")
    chosen = choose_generation(
        settings(
            generation_backend="vllm",
            vllm_mode="server",
            vllm_server_host="10.0.0.2",
            vllm_server_port=8001,
            vllm_server_group_port=51300,
            vllm_server_timeout_s=60,
        )
    )
    assert chosen.describe() == "vllm (server 10.0.0.2:8001)"
    assert chosen.grpo_arguments(hyperparameters()) == {
        "use_vllm": True,
        "vllm_mode": "server",
        "vllm_server_host": "10.0.0.2",
        "vllm_server_port": 8001,
        "vllm_group_port": 51300,
        "vllm_server_timeout": 60.0,
    }


@pytest.mark.parametrize(
    "values",
    [
        {"generation_backend": "gpu"},
        {"vllm_mode": "remote"},
        {"vllm_memory_fraction": 0},
        {"vllm_memory_fraction": 1.5},
        {"vllm_server_port": 70000},
        {"vllm_max_model_length": 0},
    ],
)
def test_bad_settings_are_refused(values: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        settings(**values)


def test_only_vllm_on_cpu_gets_the_cpu_shim() -> None:
    assert Generation(backend="vllm", device="cpu", mode="colocate").vllm_on_cpu
    assert not Generation(backend="vllm", device="cuda", mode="colocate").vllm_on_cpu
    assert not Generation(backend="transformers", device="cpu").vllm_on_cpu
