"""Job logic: creation, reads, cancellation. No HTTP here, and no commits: the caller's unit
of work commits, and the training task is queued only after it has."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.agent_code.service import (
    agent_code_specs,
    load_agent_code,
    require_scores,
)
from service.artifacts.storage import artifact_store
from service.base_models.service import check_base_model
from service.datasets.repository import DatasetRepository
from service.datasets.service import get_dataset
from service.db import after_commit
from service.errors import BadRequest, NotFound
from service.events.repository import EventRepository
from service.gpu.job_fit import check_gpu_memory
from service.http_tools.service import tool_sources
from service.job_configs.repository import JobConfigRepository
from service.jobs import step_json
from service.jobs.async_generation import check_async_generation
from service.jobs.device_options import check_cuda_only_options
from service.jobs.lineage import pin_starting_weights, resolve_init_from
from service.jobs.method_datasets import check_datasets_fit_method
from service.jobs.repository import JobRepository
from service.jobs.schemas import AVAILABLE_ENGINES, CUDA_ONLY_ENGINES, JobCreate
from service.jobs.schemas import Job as JobOut
from service.jobs.status import JobStatus
from service.jobs.step_repository import FunctionRecord, StepRepository
from service.jobs.transitions import transition
from service.models import (
    Completion,
    Evaluation,
    Job,
    JobConfigVersion,
    JobEvent,
    RewardFunctionVersion,
    new_id,
)
from service.parameters import INT32_MAX, INT64_MAX
from service.reward_functions.schemas import stored_source
from service.reward_functions.service import (
    PREFLIGHT_ROWS,
    check_reward_functions,
    check_reward_models,
    preflight,
)
from service.secrets import seal
from service.settings import get_settings
from service.usage import service as usage
from service.usage.estimates import cost_estimate
from service.webhooks import outbox as webhook_outbox
from service.work_queue.queue import enqueue_training, running_workers

logger = logging.getLogger(__name__)


def create_job(
    session: Session,
    tenant_id: str,
    payload: JobCreate,
    *,
    idempotency_key: str | None = None,
    endpoint_hosts: Sequence[str] = (),
) -> Job:
    """``endpoint_hosts``: hosts its reward code calls (an endpoint grader's, already checked),
    which the job's sandboxes may reach beside its HTTP tools'."""
    repository = JobRepository(session)
    if idempotency_key:
        existing = repository.get_by_idempotency_key(tenant_id, idempotency_key)
        if existing is not None:
            return existing
    dataset = get_dataset(session, tenant_id, payload.dataset_id)  # 404: unknown or foreign
    store = artifact_store(get_settings())
    # First: the parent may give the job its base model and LoRA shape.
    payload, starting_weights = resolve_init_from(session, tenant_id, payload, store)
    base_model = check_base_model(payload.base_model, get_settings())  # 400 before any worker
    check_datasets_fit_method(session, tenant_id, payload, dataset)  # before reward code reads it
    check_async_generation(payload, get_settings())  # 400: async generation where it cannot run
    forms = check_reward_functions(payload.reward_functions)
    model_warnings = check_reward_models(payload.reward_functions)
    tool_code, tool_hosts = tool_sources(payload.tools, payload.secrets, get_settings())
    egress_hosts = sorted({*tool_hosts, *endpoint_hosts})
    tools, environments = agent_code_specs(tool_code, payload.environments)
    loaded = load_agent_code(
        tools,
        environments,
        allow_network=payload.allow_network,
        secrets=payload.secrets,
        runtime_packages=payload.runtime_packages,
        tool_timeout_s=payload.hyperparameters.tool_timeout_s,
    )
    if payload.method == "grpo":  # a supervised job has nothing to score
        require_scores(loaded, len(payload.reward_functions))
    if payload.reward_functions and not payload.runtime_packages:
        # Functions that need runtime packages can only run once the worker has installed
        # them; they get the static check only.
        preflight(
            DatasetRepository(session).rows(payload.dataset_id, limit=PREFLIGHT_ROWS),
            payload.reward_functions,
            allow_network=payload.allow_network,
            secrets=payload.secrets,
            agent=bool(tools or environments),
            egress_hosts=egress_hosts,
        )
    prompts_per_step = payload.hyperparameters.prompts_per_step
    if payload.method == "grpo" and dataset.row_count < prompts_per_step:
        # The trainer would refuse it at start: say so before a worker is spent.
        raise BadRequest(
            f"dataset {dataset.id!r} has {dataset.row_count} rows, fewer than "
            f"prompts_per_step={prompts_per_step}: lower prompts_per_step or add rows"
        )
    _check_validation_source(session, tenant_id, payload, dataset.row_count)
    devices_warning = _check_devices(payload)
    check_gpu_memory(payload, get_settings())  # 400: vLLM and the trainer fit no worker's GPU
    check_cuda_only_options(payload, get_settings())  # 400: QLoRA etc. on a CPU-only deployment
    estimate = cost_estimate(session, payload, get_settings())

    job = Job(
        id=new_id("job"),
        tenant_id=tenant_id,
        dataset_id=payload.dataset_id,
        name=payload.name,
        base_model=payload.base_model,
        hyperparameters=payload.hyperparameters.model_dump(mode="json"),
        guards=payload.guards.model_dump(mode="json"),
        method=payload.method,
        status=JobStatus.QUEUED.value,
        config_version=1,
        allow_network=payload.allow_network,
        egress_hosts=egress_hosts,
        runtime_packages=payload.runtime_packages,
        secrets_sealed=seal(payload.secrets, get_settings()),
        secret_names=sorted(payload.secrets),
        validation_dataset_id=payload.validation_dataset_id,
        validation_split=payload.validation_split,
        num_devices=payload.num_devices,
        num_nodes=payload.num_nodes,
        engine=payload.engine,
        parent_job_id=starting_weights.start.job_id if starting_weights else None,
        parent_checkpoint_step=starting_weights.start.checkpoint_step if starting_weights else None,
        init_from_optimizer=payload.init_from_optimizer,
        idempotency_key=idempotency_key,
        model_key=estimate.model_key,
        cost_estimate=estimate.model_dump(mode="json"),
    )
    try:
        # A savepoint: a concurrent create with the same idempotency key loses the race here
        # and returns the winner's job instead of failing the request.
        with session.begin_nested():
            repository.insert(job)
    except IntegrityError:
        if idempotency_key:
            winner = repository.get_by_idempotency_key(tenant_id, idempotency_key)
            if winner is not None:
                return winner
        raise
    if starting_weights is not None:
        # After the insert, so a request that lost the idempotency race copies nothing.
        job.init_adapter_path = pin_starting_weights(store, starting_weights, job.id)
    configs = JobConfigRepository(session)
    for name, function in payload.reward_functions.items():
        configs.add_function_version(
            RewardFunctionVersion(
                job_id=job.id,
                name=name,
                version=1,
                source=stored_source(function),
                form=forms[name],
            )
        )
    for tool in tools:
        configs.add_tool_version(job.id, tool)  # version 1
    for environment in environments:
        configs.add_environment_version(job.id, environment)
    configs.add_config_version(
        JobConfigVersion(
            job_id=job.id,
            version=1,
            reward_functions={
                name: function.config_entry(1)
                for name, function in payload.reward_functions.items()
            },
            tools={tool.name: {"version": 1} for tool in tools},
            environments={
                environment.name: {"version": 1, "weight": environment.weight}
                for environment in environments
            },
            temperature=payload.hyperparameters.temperature,
            top_p=payload.hyperparameters.top_p,
        )
    )
    events = EventRepository(session)
    events.add_event(job.id, "status", "job queued", data={"status": JobStatus.QUEUED.value})
    webhook_outbox.job_created(session, job)
    for warning in [*base_model.warnings, *model_warnings]:
        events.add_event(job.id, "warning", warning)
    if devices_warning:
        events.add_event(job.id, "warning", devices_warning)
    job_id, num_devices, num_nodes = job.id, job.num_devices, job.num_nodes
    after_commit(session, lambda: enqueue_training(job_id, num_devices, num_nodes))
    return job


def _check_validation_source(
    session: Session, tenant_id: str, payload: JobCreate, training_rows: int
) -> None:
    """The validation set exists, is the tenant's, has prompts, and leaves rows to train on."""
    if payload.validation_dataset_id is not None:
        try:
            validation = get_dataset(session, tenant_id, payload.validation_dataset_id)
        except NotFound:
            raise NotFound(
                f"validation dataset {payload.validation_dataset_id!r} not found"
            ) from None
        if validation.row_count < 1:
            raise BadRequest(
                f"validation dataset {validation.id!r} has no rows: it needs prompts to evaluate"
            )
    if payload.validation_split is not None:
        held_out = validation_rows_held_out(training_rows, payload.validation_split)
        left = training_rows - held_out
        # A supervised step's examples may repeat rows: it needs one row to train on.
        prompts_per_step = (
            payload.hyperparameters.prompts_per_step if payload.method == "grpo" else 1
        )
        if left < prompts_per_step:
            raise BadRequest(
                f"validation_split={payload.validation_split} holds out {held_out} of the "
                f"dataset's {training_rows} rows, leaving {left} to train on, fewer than "
                f"prompts_per_step={prompts_per_step}: lower validation_split or add rows"
            )


def validation_rows_held_out(rows: int, split: float) -> int:
    """How many of ``rows`` training rows a validation_split holds out: at least one."""
    return max(1, round(rows * split))


def split_validation(
    rows: list[dict[str, Any]], split: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(training rows, validation rows): the last rows are held out, so every training row
    keeps its index in the dataset (completions name their row by it)."""
    kept = len(rows) - validation_rows_held_out(len(rows), split)
    return rows[:kept], rows[kept:]


def get_job(session: Session, tenant_id: str, job_id: str, *, for_update: bool = False) -> Job:
    job = JobRepository(session).get(tenant_id, job_id, for_update=for_update)
    if job is None:
        # Another tenant's job is reported exactly like a missing one.
        raise NotFound(f"job {job_id!r} not found")
    return job


def job_with_eta(session: Session, tenant_id: str, job_id: str) -> JobOut:
    """The job as GET /v1/jobs/{id} shows it: with its ETA while it runs."""
    job = get_job(session, tenant_id, job_id)
    return JobOut.model_validate(job).model_copy(
        update={"eta_seconds": usage.eta_seconds(session, job)}
    )


def list_jobs(
    session: Session, tenant_id: str, *, limit: int, after: str | None, status: JobStatus | None
) -> list[Job]:
    return JobRepository(session).list_jobs(
        tenant_id, limit=limit, after=after, status=status.value if status else None
    )


def _check_devices(payload: JobCreate) -> str | None:
    """Refuse what no set of running workers could hold (a job is never shrunk to fit); a
    warning when no worker says what it holds, so the job waits in its queue for one that can.
    """
    if payload.engine not in AVAILABLE_ENGINES:
        raise BadRequest(
            f"engine {payload.engine!r} is not available yet (available: "
            f"{', '.join(sorted(AVAILABLE_ENGINES))})"
        )
    needs_cuda = payload.engine in CUDA_ONLY_ENGINES
    if payload.num_devices == 1 and payload.num_nodes == 1 and not needs_cuda:
        return None
    workers = running_workers(get_settings().redis_url)
    if workers is None:
        return None  # the queue decides; the job waits for workers that can hold it
    if not workers:
        wanted = (
            f"a worker with {payload.num_devices} devices"
            if payload.num_nodes == 1
            else f"{payload.num_nodes} workers with {payload.num_devices} devices each"
        )
        return (
            f"no running worker says what it holds: the job waits for {wanted} (RFT_WORKER_DEVICES)"
        )
    if needs_cuda:
        workers = [worker for worker in workers if worker.accelerator == "cuda"]
        if not workers:
            raise BadRequest(
                f"engine {payload.engine!r} needs CUDA GPUs, and no running worker has any "
                "(on CPU it would silently train as plain DDP); use 'ddp' or a DeepSpeed engine"
            )
    largest = max(worker.devices for worker in workers)
    if payload.num_devices > largest:
        raise BadRequest(
            f"num_devices={payload.num_devices}: no worker can hold this job; the largest "
            f"a running worker offers is {largest} (RFT_WORKER_DEVICES)"
        )
    able = sum(1 for worker in workers if worker.devices >= payload.num_devices)
    if payload.num_nodes > able:
        raise BadRequest(
            f"num_nodes={payload.num_nodes}: the job needs {payload.num_nodes} workers with "
            f"{payload.num_devices} devices each at once; {able} running worker(s) can give "
            f"that (one worker per machine, RFT_WORKER_DEVICES)"
        )
    return None


def cancel_job(session: Session, tenant_id: str, job_id: str) -> Job:
    """A queued or paused job is cancelled at once; a running or pausing one stops at its
    next step boundary (a pausing job ends cancelled, not paused)."""
    job = get_job(session, tenant_id, job_id, for_update=True)
    return transition(session, job, JobStatus.CANCELLED, reason="cancelled by the user")


def pause_job(session: Session, tenant_id: str, job_id: str) -> Job:
    """running -> pausing: the worker (told at once) finishes the step it is on, saves a
    checkpoint and lets go; then the job reads ``paused`` (a ``paused`` event says after which
    step). Until then ``resume`` calls the pause off and ``cancel`` stops the job."""
    job = get_job(session, tenant_id, job_id, for_update=True)
    return transition(session, job, JobStatus.PAUSING, reason=None)


def resume_job(session: Session, tenant_id: str, job_id: str) -> Job:
    """pausing -> running: the pause is called off, and the worker, which still holds the job,
    trains on. paused -> queued: any worker continues from the pause checkpoint."""
    job = get_job(session, tenant_id, job_id, for_update=True)
    if job.status == JobStatus.PAUSING.value:
        # Nothing to queue: the worker still holds the job (and, should it already have
        # stopped for the pause, queues it again itself, to continue from the checkpoint).
        return transition(session, job, JobStatus.RUNNING)
    transition(session, job, JobStatus.QUEUED)
    job_id, num_devices, num_nodes = job.id, job.num_devices, job.num_nodes
    after_commit(session, lambda: enqueue_training(job_id, num_devices, num_nodes))
    return job


def steps_page_json(
    session: Session, tenant_id: str, job_id: str, *, after_step: int, limit: int
) -> str:
    """The steps page as JSON text (see service.jobs.step_json)."""
    get_job(session, tenant_id, job_id)
    rows = StepRepository(session).list_steps(job_id, after_step=after_step, limit=limit + 1)
    return step_json.steps_page_json(rows, limit)


def list_evaluations(
    session: Session, tenant_id: str, job_id: str, *, after_step: int, limit: int
) -> list[Evaluation]:
    get_job(session, tenant_id, job_id)
    return StepRepository(session).list_evaluations(job_id, after_step=after_step, limit=limit)


# ASCII digits only: str.isdigit() also accepts '²', which int() then refuses.
COMPLETION_CURSOR = r"^(0|[0-9]{1,10}:[0-9]{1,19})?$"


def parse_completion_cursor(cursor: str | None) -> tuple[int, int] | None:
    """``"<step>:<id>"`` as next_cursor gives it; empty or "0" is the first page."""
    if not cursor or cursor == "0":
        return None
    invalid = BadRequest(f"invalid cursor {cursor!r}: pass a page's next_cursor as 'after'")
    if re.fullmatch(COMPLETION_CURSOR, cursor) is None:
        raise invalid
    step, _, completion_id = cursor.partition(":")
    # Past the columns' range (integer step, bigint id) no cursor we issued can lie.
    if int(step) > INT32_MAX or int(completion_id) > INT64_MAX:
        raise invalid
    return int(step), int(completion_id)


def list_completions(
    session: Session,
    tenant_id: str,
    job_id: str,
    *,
    step: int | None,
    after: str | None,
    limit: int,
) -> list[Completion]:
    get_job(session, tenant_id, job_id)
    return StepRepository(session).list_completions(
        job_id, step=step, after=parse_completion_cursor(after), limit=limit
    )


def list_events(
    session: Session, tenant_id: str, job_id: str, *, after_id: int, limit: int
) -> list[JobEvent]:
    get_job(session, tenant_id, job_id)
    return EventRepository(session).list_events(job_id, after_id=after_id, limit=limit)


def list_function_records(
    session: Session,
    tenant_id: str,
    job_id: str,
    model: type[FunctionRecord],
    *,
    step: int | None,
    function: str | None,
    after_id: int,
    limit: int,
) -> list[FunctionRecord]:
    get_job(session, tenant_id, job_id)
    return StepRepository(session).list_function_records(
        model, job_id, step=step, function=function, after_id=after_id, limit=limit
    )
