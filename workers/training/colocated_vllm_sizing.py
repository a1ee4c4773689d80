"""In a training process: size colocated vLLM's share of this GPU for the job it starts.

Only where the arithmetic applies: vLLM colocated on a CUDA GPU, and the job did not set
``vllm_gpu_memory_utilization`` itself. The model's config.json (a local directory or the
hub's, cached) and this GPU's total memory go into service.gpu.memory_plan; a job that cannot
fit fails here, at its start, with the arithmetic, instead of running out of memory later.
A config that cannot be read leaves the worker's RFT_VLLM_MEMORY_FRACTION in force.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path

from service.gpu.memory_plan import (
    CONFIG_FILE,
    INDEX_FILE,
    JobMemory,
    MemoryPlan,
    ModelShape,
    UnknownModelShape,
    checkpoint_bytes,
    plan_memory,
)
from workers.failures import GenerationSetupError
from workers.training.spec import TrainingSpec

logger = logging.getLogger(__name__)


def colocated_memory_plan(spec: TrainingSpec, model_path: str | None) -> MemoryPlan | None:
    """The memory plan whose utilization vLLM gets, or None where none is computed."""
    generation, hp = spec.generation, spec.hyperparameters
    if model_path is None or not (
        generation.uses_vllm and generation.mode == "colocate" and generation.device == "cuda"
    ):
        return None
    if hp.vllm_gpu_memory_utilization is not None:
        return None
    shape = _model_shape(model_path)
    if shape is None:
        return None
    import torch

    _, total = torch.cuda.mem_get_info()
    job = dataclasses.replace(
        JobMemory.from_hyperparameters(
            hp,
            num_devices=int(os.environ.get("WORLD_SIZE", "1")),
            engine=_engine(),
            configured_max_model_len=generation.max_model_length,
        ),
        reward_model_bytes=_reward_model_bytes(spec),
    )
    plan = plan_memory(shape, job, total / 1024**3)
    if plan.problem is not None:
        raise GenerationSetupError(
            f"{plan.problem}. Or set hyperparameters.vllm_gpu_memory_utilization to give vLLM "
            "a share of your own"
        )
    logger.info(
        "vLLM gets %.2f of this GPU: %s, of %.1f GiB",
        plan.utilization,
        plan.arithmetic(),
        plan.device_gib,
    )
    return plan


def _reward_model_bytes(spec: TrainingSpec) -> int:
    """The weights of the job's reward models, already on this rank's device when vLLM starts
    (the built-in tiny one, and any whose config cannot be read, count nothing)."""
    from service.base_models.built_in.tiny_reward_model import TINY_REWARD_MODEL_NAME

    shapes = (
        _model_shape(entry.model)
        for entry in spec.reward_config.reward_models
        if entry.model != TINY_REWARD_MODEL_NAME
    )
    return sum(shape.weight_bytes() for shape in shapes if shape is not None)


def _model_shape(model_path: str) -> ModelShape | None:
    try:
        config = _read_json(model_path, CONFIG_FILE)
        if config is None:
            return None
        index = _read_json(model_path, INDEX_FILE)
        return ModelShape.from_config(config, checkpoint_bytes=checkpoint_bytes(index))
    except (OSError, ValueError, UnknownModelShape) as exc:
        logger.warning(
            "cannot size vLLM from %s's config (%s): RFT_VLLM_MEMORY_FRACTION applies",
            model_path,
            exc,
        )
        return None


def _read_json(model_path: str, filename: str) -> dict[str, object] | None:
    """A file of a local model directory, or of a hub model (downloaded once, cached)."""
    from transformers.utils import cached_file

    found = cached_file(
        model_path,
        filename,
        _raise_exceptions_for_missing_entries=False,
        _raise_exceptions_for_connection_errors=False,
    )
    if not found:
        return None
    parsed = json.loads(Path(found).read_text())
    return parsed if isinstance(parsed, dict) else None


def _engine() -> str:
    """fsdp shards the trainer's weights; accelerate's FSDP launcher says so in the
    environment (as workers.training.rank_process reads it)."""
    return "fsdp" if os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true" else "ddp"
