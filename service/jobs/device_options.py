"""At job creation: refuse options that only a CUDA GPU runs (QLoRA's 4-bit base, the 8-bit
optimizer, flash attention) on a deployment whose running workers have none.

Checked against the workers' adverts (service.work_queue.queue): when none is running the job
is accepted and waits, and a CPU worker that takes it later fails it at its start, naming the option
(workers.training.model_options) rather than training something else.
"""

from __future__ import annotations

from service.errors import BadRequest
from service.jobs.schemas import JobCreate
from service.settings import Settings
from service.work_queue.queue import running_workers


class OptionNeedsCuda(BadRequest):
    pass


def check_cuda_only_options(payload: JobCreate, settings: Settings) -> None:
    """Raise OptionNeedsCuda (400) when the job asks for a CUDA-only option and no running
    worker that could take it has a CUDA GPU."""
    wanted = payload.hyperparameters.cuda_only_options()
    if not wanted:
        return
    workers = running_workers(settings.redis_url) or []
    if not workers:
        return
    able = [worker for worker in workers if worker.devices >= payload.num_devices]
    if any(worker.accelerator == "cuda" for worker in able):
        return
    raise OptionNeedsCuda(
        f"{' and '.join(wanted)} need a CUDA GPU, and none of this deployment's "
        f"{len(workers)} running worker(s) that could take a {payload.num_devices}-device job "
        "has one (they train on CPU). Drop the option, or run the job where a GPU worker is."
    )
