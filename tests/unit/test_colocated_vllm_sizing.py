"""vLLM sized for the job at its start (workers.training.colocated_vllm_sizing), down to the
GRPOConfig the worker builds: no GPU here, so the GPU's memory is the test's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from sandbox.api import RewardFunctionSpec
from service.jobs.hyperparameters import Hyperparameters
from tests.unit.test_memory_plan import QWEN25_7B, QWEN25_14B
from workers.failures import GenerationSetupError
from workers.training.generation import Generation
from workers.training.spec import TrainingSpec
from workers.training.step_records import RewardConfig

GIB = 1024**3
SOURCE = "def one(prompt, completion, example):\n    return 1.0\n"
COLOCATED_GPU = Generation(backend="vllm", device="cuda", mode="colocate", memory_fraction=0.3)


def model_dir(tmp_path: Path, config: dict[str, Any]) -> str:
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config))
    return str(directory)


def spec(tmp_path: Path, generation: Generation = COLOCATED_GPU, **hp: Any) -> TrainingSpec:
    return TrainingSpec(
        base_model="/models/qwen",
        dataset=[{"prompt": f"p{i}"} for i in range(8)],
        reward_config=RewardConfig(version=1, functions=[RewardFunctionSpec("one", SOURCE)]),
        hyperparameters=Hyperparameters.model_validate({"max_prompt_length": 512, **hp}),
        output_dir=tmp_path / "out",
        model_cache_dir=tmp_path,
        generation=generation,
    )


@pytest.fixture
def gpu_of(monkeypatch: pytest.MonkeyPatch) -> Any:
    def set_memory(gib: float) -> None:
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (0, int(gib * GIB)))

    return set_memory


def test_the_built_config_carries_the_sized_share_and_the_jobs_vllm_settings(
    tmp_path: Path, gpu_of: Any
) -> None:
    from workers.training.grpo import _grpo_config

    gpu_of(80)
    path = model_dir(tmp_path, QWEN25_7B)
    config = _grpo_config(spec(tmp_path), use_cuda=False, use_bf16=False, model_path=path)
    assert config.use_vllm and config.vllm_mode == "colocate"
    assert config.vllm_gpu_memory_utilization == 0.42  # tests/unit/test_memory_plan.py
    assert config.vllm_max_model_length == 512 + 512
    assert (config.vllm_tensor_parallel_size, config.vllm_enable_sleep_mode) == (1, False)

    tuned = spec(
        tmp_path,
        vllm_gpu_memory_utilization=0.55,
        vllm_sleep_mode=True,
        vllm_tensor_parallel_size=2,
        vllm_max_model_length=2048,
    )
    config = _grpo_config(tuned, use_cuda=False, use_bf16=False, model_path=path)
    assert config.vllm_gpu_memory_utilization == 0.55
    assert config.vllm_enable_sleep_mode is True
    assert config.vllm_tensor_parallel_size == 2
    assert config.vllm_max_model_length == 2048


def test_a_job_that_cannot_fit_fails_at_its_start_with_the_arithmetic(
    tmp_path: Path, gpu_of: Any
) -> None:
    from workers.training.colocated_vllm_sizing import colocated_memory_plan

    gpu_of(80)
    path = model_dir(tmp_path, QWEN25_14B)
    with pytest.raises(GenerationSetupError, match=r"> device 80\.0 GiB") as refused:
        colocated_memory_plan(spec(tmp_path), path)
    assert "vllm_gpu_memory_utilization" in str(refused.value)
    plan = colocated_memory_plan(spec(tmp_path, preset="medium"), path)
    assert plan is not None and plan.utilization == 0.5


def test_nothing_is_sized_where_the_arithmetic_does_not_apply(tmp_path: Path, gpu_of: Any) -> None:
    from workers.training.colocated_vllm_sizing import colocated_memory_plan

    gpu_of(80)
    path = model_dir(tmp_path, QWEN25_7B)
    on_cpu = Generation(backend="vllm", device="cpu", mode="colocate", memory_fraction=0.1)
    assert colocated_memory_plan(spec(tmp_path, on_cpu), path) is None
    transformers = Generation(backend="transformers", device="cuda")
    assert colocated_memory_plan(spec(tmp_path, transformers), path) is None
    assert colocated_memory_plan(spec(tmp_path, vllm_gpu_memory_utilization=0.5), path) is None
    # A config the arithmetic cannot read: RFT_VLLM_MEMORY_FRACTION stays in force.
    (Path(path) / "config.json").write_text(json.dumps({"model_type": "bert"}))
    assert colocated_memory_plan(spec(tmp_path), path) is None


def test_the_reward_models_on_the_device_count_against_vllms_share(
    tmp_path: Path, gpu_of: Any
) -> None:
    """A 7B reward model (~14 GiB in bf16, on every rank's device before vLLM starts) turns a
    14B job that fits 80 GB with the medium preset into one that does not."""
    from workers.training.colocated_vllm_sizing import colocated_memory_plan
    from workers.training.step_records import RewardModelSpec

    gpu_of(80)
    path = model_dir(tmp_path, QWEN25_14B)
    reward_model = tmp_path / "reward-7b"
    reward_model.mkdir()
    (reward_model / "config.json").write_text(json.dumps(QWEN25_7B))
    alone = colocated_memory_plan(spec(tmp_path, preset="medium"), path)
    assert alone is not None and alone.reward_models_gib == 0
    judged = spec(tmp_path, preset="medium")
    judged.reward_config.reward_models.append(RewardModelSpec("judge", str(reward_model)))
    with pytest.raises(GenerationSetupError, match=r"reward models 14\.2") as refused:
        colocated_memory_plan(judged, path)
    assert "smaller reward model" in str(refused.value)
    # The built-in tiny reward model counts nothing.
    tiny = spec(tmp_path, preset="medium")
    tiny.reward_config.reward_models.append(RewardModelSpec("judge", "rft-tiny-reward"))
    plan = colocated_memory_plan(tiny, path)
    assert plan is not None and plan.utilization == alone.utilization
