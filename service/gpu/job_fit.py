"""At job creation: refuse a job whose vLLM and trainer cannot share the GPUs of any worker
that could take it (the arithmetic: service.gpu.memory_plan).

Checked only where it applies: every running worker able to hold the job (enough devices)
says it has CUDA GPUs of a known size and generates with vLLM colocated on them, and the base
model's config.json can be read here (a local directory, or the hub). Otherwise nothing is
checked: a CPU-only deployment, a worker generating with transformers, an unreadable model.
"""

from __future__ import annotations

import dataclasses
import logging

from service.base_models.model_config import read_model_files
from service.errors import BadRequest
from service.gpu.memory_plan import JobMemory, ModelShape, UnknownModelShape, plan_memory
from service.jobs.schemas import JobCreate
from service.reward_functions.schemas import model_entries
from service.settings import Settings
from service.work_queue.queue import WorkerCapacity, running_workers

logger = logging.getLogger(__name__)


class JobDoesNotFitGpu(BadRequest):
    pass


def check_gpu_memory(payload: JobCreate, settings: Settings) -> None:
    """Raise JobDoesNotFitGpu (400) when the job fits none of the GPUs that would run it."""
    if payload.method == "sft":
        return  # the plan shares a GPU between vLLM and the trainer; SFT generates nothing
    workers = _vllm_gpu_workers(payload, settings)
    if not workers:
        return
    shape = _readable_shape(payload.base_model, settings)
    if shape is None:
        return
    job = dataclasses.replace(
        JobMemory.from_hyperparameters(
            payload.hyperparameters,
            num_devices=payload.num_devices,
            num_nodes=payload.num_nodes,
            engine=payload.engine,
        ),
        reward_model_bytes=_reward_model_bytes(payload, settings),
    )
    device_gib = max(worker.gpu_memory_gib or 0.0 for worker in workers)
    plan = plan_memory(shape, job, device_gib)
    if plan.problem is not None:
        raise JobDoesNotFitGpu(f"base_model {payload.base_model!r}: {plan.problem}")


def _reward_model_bytes(payload: JobCreate, settings: Settings) -> int:
    """The weights of the job's reward models whose config.json can be read here (the others,
    like the built-in tiny one, count nothing)."""
    shapes = (
        _readable_shape(entry.model, settings)
        for entry in model_entries(payload.reward_functions).values()
    )
    return sum(shape.weight_bytes() for shape in shapes if shape is not None)


def _readable_shape(model: str, settings: Settings) -> ModelShape | None:
    """``model``'s shape from its config.json, or None where it cannot be read here (then
    nothing of it is checked)."""
    files = read_model_files(model, settings)
    if files is None:
        return None
    try:
        return ModelShape.from_config(files.config, checkpoint_bytes=files.checkpoint_bytes)
    except UnknownModelShape as exc:
        logger.info("not counting %r in the GPU memory check: %s", model, exc)
        return None


def _vllm_gpu_workers(payload: JobCreate, settings: Settings) -> list[WorkerCapacity]:
    """The running workers that could take the job, when all of them generate with vLLM on
    GPUs of known size; else none (the job may run where this check does not apply)."""
    workers = running_workers(settings.redis_url) or []
    able = [worker for worker in workers if worker.devices >= payload.num_devices]
    if not able or not all(
        worker.accelerator == "cuda" and worker.vllm and worker.gpu_memory_gib for worker in able
    ):
        return []
    return able
