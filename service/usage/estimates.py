"""What a job is expected to cost, before it runs: at creation (stored on the job) and in a
dry run (POST /v1/jobs/estimate).

Per kind of running worker that could take the job (enough devices; CUDA for CUDA-only
engines): the typical completion tokens of a step (measured tokens per completion, capped at
max_completion_length, x completions per step), the step time (measured device-seconds per
token x those tokens / the job's devices) and the run's GPU-hours. Where nothing was measured
for this model on that kind of worker, the entry says so and gives no figure: no number is
invented.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from sqlalchemy.orm import Session

from service.artifacts.storage import artifact_store
from service.base_models.service import check_base_model
from service.datasets.service import get_dataset
from service.jobs.lineage import resolve_init_from
from service.jobs.schemas import CUDA_ONLY_ENGINES, JobCreate
from service.settings import Settings, get_settings
from service.usage.repository import ThroughputRepository
from service.usage.schemas import NO_MEASUREMENT, CostEstimate, WorkerKindEstimate
from service.usage.throughput import model_key
from service.work_queue.queue import running_workers


class AdvertisedWorker(Protocol):
    """What a running worker's advert says (service.work_queue.queue.WorkerCapacity; read for
    the API by service.work_queue.queue.running_workers)."""

    @property
    def devices(self) -> int: ...
    @property
    def accelerator(self) -> str: ...
    @property
    def device_kind(self) -> str | None: ...
    @property
    def generation_backend(self) -> str | None: ...


def cost_estimate(session: Session, payload: JobCreate, settings: Settings) -> CostEstimate:
    """What the job is expected to cost on the running workers that could take it (at
    creation, after its checks)."""
    key = model_key(payload.base_model, settings)
    return estimate_cost(
        ThroughputRepository(session), payload, key, (running_workers(settings.redis_url) or [])
    )


def estimate_job(session: Session, tenant_id: str, payload: JobCreate) -> CostEstimate:
    """A dry run of creation's cost: the dataset and the base model are checked (404, 400),
    and nothing is stored."""
    settings = get_settings()
    get_dataset(session, tenant_id, payload.dataset_id)
    payload, _ = resolve_init_from(session, tenant_id, payload, artifact_store(settings))
    check_base_model(payload.base_model, settings)
    return cost_estimate(session, payload, settings)


def estimate_cost(
    throughput: ThroughputRepository,
    payload: JobCreate,
    model_key: str,
    workers: Sequence[AdvertisedWorker],
) -> CostEstimate:
    hp = payload.hyperparameters
    devices = payload.num_devices * payload.num_nodes
    grpo = payload.method == "grpo"
    completions = hp.prompts_per_step * hp.num_generations if grpo else None
    able = [
        worker
        for worker in workers
        if worker.devices >= payload.num_devices
        and (payload.engine not in CUDA_ONLY_ENGINES or worker.accelerator == "cuda")
    ]
    kinds = sorted(
        {
            (worker.device_kind, worker.generation_backend)
            for worker in able
            if worker.device_kind and worker.generation_backend
        }
    )
    note = None
    if not workers:
        note = "no running worker advertises itself: nothing to estimate on"
    elif not able:
        note = "no running worker can take this job (devices, engine)"
    elif not kinds:
        note = "the workers that can take this job do not say their device kind (older workers)"
    entries = []
    for device_kind, backend in kinds:
        assert device_kind is not None and backend is not None
        entries.append(
            _on_kind(throughput, device_kind, backend, model_key, payload, completions, devices)
        )
    return CostEstimate(
        model_key=model_key,
        devices=devices,
        train_steps=hp.train_steps,
        completions_per_step=completions,
        max_tokens=completions * hp.max_completion_length * hp.train_steps if completions else None,
        workers=entries,
        note=note,
    )


def _on_kind(
    throughput: ThroughputRepository,
    device_kind: str,
    backend: str,
    model_key: str,
    payload: JobCreate,
    completions: int | None,
    devices: int,
) -> WorkerKindEstimate:
    measured = throughput.get(device_kind, model_key, backend)
    if measured is None or completions is None:
        message = (
            NO_MEASUREMENT
            if completions is not None
            else "supervised jobs are not measured yet: no estimate"
        )
        return WorkerKindEstimate(
            device_kind=device_kind, generation_backend=backend, basis="none", message=message
        )
    hp = payload.hyperparameters
    tokens = completions * min(float(hp.max_completion_length), measured.tokens_per_completion)
    step_s = measured.device_seconds_per_token * tokens / devices
    total_s = step_s * hp.train_steps
    return WorkerKindEstimate(
        device_kind=device_kind,
        generation_backend=backend,
        basis="measured",
        steps_measured=measured.steps,
        tokens_per_step=tokens,
        step_seconds=step_s,
        total_seconds=total_s,
        gpu_hours=total_s * devices / 3600,
    )
