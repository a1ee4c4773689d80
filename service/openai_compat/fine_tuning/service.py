"""OpenAI's fine-tuning jobs as our jobs: a reinforcement job is created through
service.jobs (same pre-flight, same row, same worker) with its grader compiled into reward
functions, a supervised one as a job of method 'sft', and every job of the tenant reads back
as a fine_tuning.job. Nothing is stored twice: the grader is read back from the reward source
it was compiled into, and OpenAI's hyperparameters from ours (docs/openai-compat.md has the
mapping)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError
from sqlalchemy.orm import Session

from service.artifacts.repository import CheckpointRepository
from service.datasets.service import get_dataset
from service.errors import BadRequest, NotFound
from service.events.repository import EventRepository
from service.http_tools.schemas import HttpToolCreate
from service.http_tools.service import http_declaration, seal_header_values
from service.inference.service import fine_tuned_model_name
from service.job_configs.repository import JobConfigRepository
from service.jobs import service as jobs
from service.jobs.hyperparameters import Hyperparameters
from service.jobs.method_datasets import DatasetUnfitForMethod
from service.jobs.schemas import JobCreate
from service.jobs.status import JobStatus
from service.jobs.step_repository import StepRepository
from service.models import Dataset, Job
from service.openai_compat.files.schemas import OpenAIPage
from service.openai_compat.fine_tuning.schemas import (
    CheckpointMetrics,
    FineTuningJob,
    FineTuningJobCheckpoint,
    FineTuningJobCreate,
    FineTuningJobEvent,
    FineTuningJobStatus,
    JobError,
    JobHyperparameters,
    ReinforcementHyperparameters,
    SupervisedHyperparameters,
)
from service.openai_compat.graders.compile import (
    check_grader,
    grader_in_source,
    judge_environment,
    part_reward_names,
    reward_functions,
    reward_name,
    uses_judge,
    with_sealed_headers,
)
from service.openai_compat.graders.schemas import Grader
from service.settings import get_settings

TINY_MODEL = "rft-tiny"
TINY_PRESET = "tiny-cpu"
# Sampled completions per prompt at compute_multiplier 1 is the preset's (or default's)
# num_generations; GRPO needs at least two to compare.
MIN_GENERATIONS = 2
MAX_GENERATIONS = 1024  # past any group size worth sampling; Hyperparameters checks the rest
GRADER_ADAPTER: TypeAdapter[Any] = TypeAdapter(Grader)
Item = TypeVar("Item", bound=BaseModel)


class InvalidJobRequest(BadRequest):
    def __init__(self, detail: str, *, param: str | None = None) -> None:
        super().__init__(detail)
        self.param = param


def unix(moment: datetime | None) -> int | None:
    return int(moment.timestamp()) if moment is not None else None


# OpenAI's job statuses have no "pausing" (the worker finishing its step and saving the pause
# checkpoint): such a job reads "paused" at once, as code written for OpenAI expects after a
# pause. A resume then calls the pause off (the job reads "running" again) and a cancel stops
# it: a client that took "paused" at its word is never refused (docs/openai-compat.md).
OPENAI_STATUSES: dict[JobStatus, FineTuningJobStatus] = {
    JobStatus.QUEUED: "queued",
    JobStatus.RUNNING: "running",
    JobStatus.PAUSING: "paused",
    JobStatus.PAUSED: "paused",
    JobStatus.SUCCEEDED: "succeeded",
    JobStatus.FAILED: "failed",
    JobStatus.CANCELLED: "cancelled",
}


def openai_status(status: JobStatus) -> FineTuningJobStatus:
    return OPENAI_STATUSES[status]


# --- hyperparameters ---------------------------------------------------------------------


def preset_for(model: str) -> str | None:
    """rft-tiny trains with its own recipe (the tiny-cpu preset); other models use ours."""
    return TINY_PRESET if model == TINY_MODEL else None


def our_hyperparameters(
    theirs: ReinforcementHyperparameters, *, model: str, seed: int | None, rows: int
) -> Hyperparameters:
    """OpenAI's reinforcement hyperparameters as ours; "auto" (or absent) keeps our value."""
    preset = preset_for(model)
    base = Hyperparameters.model_validate({"preset": preset} if preset else {})
    values: dict[str, Any] = {"preset": preset} if preset else {}
    if isinstance(theirs.batch_size, int):
        values["prompts_per_step"] = theirs.batch_size
    prompts_per_step = values.get("prompts_per_step", base.prompts_per_step)
    if isinstance(theirs.n_epochs, int):
        if theirs.n_epochs < 1:
            raise InvalidJobRequest("n_epochs must be at least 1", param="n_epochs")
        values["train_steps"] = max(1, math.ceil(theirs.n_epochs * rows / prompts_per_step))
    if isinstance(theirs.learning_rate_multiplier, float | int):
        values["learning_rate"] = base.learning_rate * theirs.learning_rate_multiplier
    if isinstance(theirs.compute_multiplier, float | int):
        generations = base.num_generations * theirs.compute_multiplier
        if not math.isfinite(generations) or generations > MAX_GENERATIONS:
            raise InvalidJobRequest(
                f"compute_multiplier {theirs.compute_multiplier} asks for more than "
                f"{MAX_GENERATIONS} completions per prompt",
                param="compute_multiplier",
            )
        values["num_generations"] = max(MIN_GENERATIONS, round(generations))
    if isinstance(theirs.eval_interval, int):
        values["eval_every"] = theirs.eval_interval
    if isinstance(theirs.eval_samples, int):
        values["eval_samples"] = theirs.eval_samples
    if seed is not None:
        values["seed"] = seed
    return validated_hyperparameters(values, param="method.reinforcement.hyperparameters")


def validated_hyperparameters(values: dict[str, Any], *, param: str) -> Hyperparameters:
    try:
        return Hyperparameters.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise InvalidJobRequest(
            f"hyperparameters give {field} = {first.get('input')!r}: {first['msg']}",
            param=param,
        ) from None


def their_hyperparameters(job: Job, rows: int) -> ReinforcementHyperparameters:
    ours = job.hyperparameters
    preset = ours.get("preset")
    base = Hyperparameters.model_validate({"preset": preset} if preset else {})
    prompts_per_step = int(ours.get("prompts_per_step", base.prompts_per_step))
    return ReinforcementHyperparameters(
        batch_size=prompts_per_step,
        n_epochs=max(1, round(int(ours["train_steps"]) * prompts_per_step / max(1, rows))),
        learning_rate_multiplier=float(ours.get("learning_rate", base.learning_rate))
        / base.learning_rate,
        compute_multiplier=int(ours.get("num_generations", base.num_generations))
        / base.num_generations,
        eval_interval=ours.get("eval_every") or "auto",
        eval_samples=int(ours.get("eval_samples", base.eval_samples)),
        reasoning_effort="default",
    )


# --- jobs --------------------------------------------------------------------------------


def create_job(session: Session, tenant_id: str, request: FineTuningJobCreate) -> FineTuningJob:
    method = request.method
    if method is None or method.type == "supervised":
        # OpenAI's default method; its older requests give hyperparameters at the top level.
        return create_supervised_job(session, tenant_id, request)
    if request.hyperparameters:
        raise InvalidJobRequest(
            "top-level hyperparameters are for supervised jobs (deprecated by OpenAI): give "
            "method.reinforcement.hyperparameters",
            param="hyperparameters",
        )
    if method.type != "reinforcement" or method.reinforcement is None:
        raise InvalidJobRequest(
            f"method {method.type!r} is not offered here: give method={{'type': "
            "'reinforcement', 'reinforcement': {'grader': ..., 'hyperparameters': ...}} or "
            "{'type': 'supervised', 'supervised': {'hyperparameters': ...}}",
            param="method",
        )
    report_to, secrets = integrations(request.integrations)
    # OpenAI's API has no job secrets: a token in an endpoint's headers is sealed as one.
    grader = with_sealed_headers(method.reinforcement.grader, secrets)
    tools = [
        HttpToolCreate.model_validate(
            {
                **tool.model_dump(),
                "headers": seal_header_values(tool.headers, f"tool {tool.name}", secrets),
            }
        )
        for tool in method.reinforcement.tools or []
    ]
    settings = get_settings()
    endpoint_hosts = check_grader(grader, settings, secrets)
    training = training_files(session, tenant_id, request)
    theirs = method.reinforcement.hyperparameters or ReinforcementHyperparameters()
    hyperparameters = our_hyperparameters(
        theirs, model=request.model, seed=request.seed, rows=training.row_count
    )
    if report_to:
        hyperparameters = hyperparameters.model_copy(update={"report_to": report_to})
    if method.reinforcement.tools and theirs.max_turns is not None:
        hyperparameters = hyperparameters.model_copy(update={"max_turns": theirs.max_turns})
    judged = uses_judge(grader)
    payload = JobCreate(
        dataset_id=training.id,
        base_model=request.model,
        hyperparameters=hyperparameters,
        name=request.suffix,
        reward_functions=reward_functions(grader),
        tools=tools,
        allow_network=judged,
        secrets={**secrets, **(judge_environment(settings) if judged else {})},
        validation_dataset_id=request.validation_file,
    )
    job = jobs.create_job(session, tenant_id, payload, endpoint_hosts=endpoint_hosts)
    if theirs.reasoning_effort not in (None, "default"):
        EventRepository(session).add_event(
            job.id,
            "warning",
            f"reasoning_effort={theirs.reasoning_effort!r} has no effect: open models here "
            "have no reasoning-effort setting",
        )
    return fine_tuning_job(session, job, training.row_count)


def training_files(session: Session, tenant_id: str, request: FineTuningJobCreate) -> Dataset:
    """The training file's dataset, after checking that both files are the tenant's."""
    try:
        training = get_dataset(session, tenant_id, request.training_file)
    except NotFound:
        raise NotFound(f"No such File object: {request.training_file}") from None
    if request.validation_file is not None:
        try:
            get_dataset(session, tenant_id, request.validation_file)
        except NotFound:
            raise NotFound(f"No such File object: {request.validation_file}") from None
    return training


# --- supervised jobs ---------------------------------------------------------------------


def sft_base(preset: str | None) -> Hyperparameters:
    """What a supervised job of ``preset`` trains with before OpenAI's hyperparameters apply."""
    given = Hyperparameters.sft_request({"preset": preset} if preset else {})
    return Hyperparameters.model_validate(given).with_sft_defaults()


def our_supervised_hyperparameters(
    theirs: SupervisedHyperparameters, *, model: str, seed: int | None, rows: int
) -> Hyperparameters:
    """OpenAI's supervised hyperparameters as ours; "auto" (or absent) keeps our value."""
    preset = preset_for(model)
    base = sft_base(preset)
    values: dict[str, Any] = Hyperparameters.sft_request({"preset": preset} if preset else {})
    if isinstance(theirs.batch_size, int):
        values["batch_size"] = theirs.batch_size
    batch_size = values.get("batch_size", base.batch_size)
    if isinstance(theirs.n_epochs, int):
        if theirs.n_epochs < 1:
            raise InvalidJobRequest("n_epochs must be at least 1", param="n_epochs")
        if isinstance(batch_size, int) and batch_size >= 1:
            values["train_steps"] = max(1, math.ceil(theirs.n_epochs * rows / batch_size))
    if isinstance(theirs.learning_rate_multiplier, float | int):
        values["learning_rate"] = base.learning_rate * theirs.learning_rate_multiplier
    if seed is not None:
        values["seed"] = seed
    return validated_hyperparameters(values, param="method.supervised.hyperparameters")


def their_supervised_hyperparameters(job: Job, rows: int) -> SupervisedHyperparameters:
    ours = job.hyperparameters
    base = sft_base(ours.get("preset"))
    batch_size = int(ours.get("batch_size") or base.batch_size or 1)
    return SupervisedHyperparameters(
        batch_size=batch_size,
        n_epochs=max(1, round(int(ours["train_steps"]) * batch_size / max(1, rows))),
        learning_rate_multiplier=float(ours.get("learning_rate", base.learning_rate))
        / base.learning_rate,
    )


def create_supervised_job(
    session: Session, tenant_id: str, request: FineTuningJobCreate
) -> FineTuningJob:
    """A job of method 'sft' on the training file's conversations (each line's messages,
    ending with the assistant's answer)."""
    supervised = request.method.supervised if request.method is not None else None
    given = supervised.hyperparameters if supervised is not None else None
    if request.hyperparameters:
        if given is not None:
            raise InvalidJobRequest(
                "hyperparameters are given twice: keep method.supervised.hyperparameters and "
                "drop the (deprecated) top-level ones",
                param="hyperparameters",
            )
        try:
            given = SupervisedHyperparameters.model_validate(request.hyperparameters)
        except ValidationError as exc:
            raise InvalidJobRequest(
                f"hyperparameters: {exc.errors()[0]['msg']}", param="hyperparameters"
            ) from None
    training = training_files(session, tenant_id, request)
    hyperparameters = our_supervised_hyperparameters(
        given or SupervisedHyperparameters(),
        model=request.model,
        seed=request.seed,
        rows=training.row_count,
    )
    report_to, secrets = integrations(request.integrations)
    if report_to:
        hyperparameters = hyperparameters.model_copy(update={"report_to": report_to})
    payload = JobCreate(
        method="sft",
        dataset_id=training.id,
        base_model=request.model,
        hyperparameters=hyperparameters,
        name=request.suffix,
        secrets=secrets,
        validation_dataset_id=request.validation_file,
    )
    try:
        job = jobs.create_job(session, tenant_id, payload)
    except DatasetUnfitForMethod as exc:
        param = "validation_file" if exc.dataset_id == request.validation_file else "training_file"
        raise InvalidJobRequest(exc.detail, param=param) from None
    return fine_tuning_job(session, job, training.row_count)


def integrations(given: list[dict[str, Any]] | None) -> tuple[list[str], dict[str, str]]:
    """OpenAI's wandb integration as our report_to and the tracker's environment."""
    report_to: list[str] = []
    secrets: dict[str, str] = {}
    for integration in given or []:
        if integration.get("type") != "wandb":
            raise InvalidJobRequest(
                f"integration type {integration.get('type')!r} is not offered: only 'wandb'",
                param="integrations",
            )
        wandb = integration.get("wandb") or {}
        report_to.append("wandb")
        for key, variable in (
            ("project", "WANDB_PROJECT"),
            ("entity", "WANDB_ENTITY"),
            ("name", "WANDB_NAME"),
        ):
            if isinstance(wandb.get(key), str):
                secrets[variable] = wandb[key]
    return report_to, secrets


def job_grader(session: Session, job: Job) -> Any | None:
    """The grader a job was created with, read back from its compiled reward source."""
    for name, version in JobConfigRepository(session).latest_function_versions(job.id).items():
        grader = grader_in_source(version.source)
        if grader is not None and reward_name(str(grader.get("name", ""))) == name:
            try:
                return GRADER_ADAPTER.validate_python(grader)
            except ValidationError:
                return None
    return None


def job_http_tools(session: Session, job: Job) -> list[dict[str, Any]]:
    """The HTTP tools of the job's newest config, as declared."""
    configs = JobConfigRepository(session)
    version = configs.get_config_version(job.id, job.config_version)
    if version is None:
        return []
    tools, _ = configs.stored_agent_code(version)
    declared = (http_declaration(tool.source) for tool in tools)
    return [tool.model_dump(mode="json") for tool in declared if tool is not None]


def fine_tuning_job(session: Session, job: Job, rows: int | None = None) -> FineTuningJob:
    if rows is None:
        rows = get_dataset(session, job.tenant_id, job.dataset_id).row_count
    hyperparameters: ReinforcementHyperparameters | SupervisedHyperparameters
    if job.method == "sft":
        hyperparameters = their_supervised_hyperparameters(job, rows)
        method: dict[str, Any] = {
            "type": "supervised",
            "supervised": {"hyperparameters": hyperparameters.model_dump(exclude_none=True)},
        }
    else:
        hyperparameters = their_hyperparameters(job, rows)
        grader = job_grader(session, job)
        method = {
            "type": "reinforcement",
            "reinforcement": {
                "grader": GRADER_ADAPTER.dump_python(grader, mode="json", exclude_none=True)
                if grader is not None
                else None,
                "hyperparameters": hyperparameters.model_dump(exclude_none=True),
            },
        }
        tools = job_http_tools(session, job)
        if tools:
            method["reinforcement"]["tools"] = tools
    status = JobStatus(job.status)
    return FineTuningJob(
        id=job.id,
        created_at=int(job.created_at.timestamp()),
        error=(
            JobError(code="job_failed", message=job.failure_reason or "the job failed")
            if status == JobStatus.FAILED
            else None
        ),
        fine_tuned_model=(
            fine_tuned_model_name(job.base_model, job.id) if status == JobStatus.SUCCEEDED else None
        ),
        finished_at=unix(job.finished_at),
        hyperparameters=JobHyperparameters(
            batch_size=hyperparameters.batch_size,
            learning_rate_multiplier=hyperparameters.learning_rate_multiplier,
            n_epochs=hyperparameters.n_epochs,
        ),
        model=job.base_model,
        organization_id=job.tenant_id,
        seed=int(job.hyperparameters.get("seed", 0)),
        status=openai_status(status),
        training_file=job.dataset_id,
        validation_file=job.validation_dataset_id,
        suffix=job.name,
        method=method,
    )


def get_fine_tuning_job(session: Session, tenant_id: str, job_id: str) -> FineTuningJob:
    return fine_tuning_job(session, get_job(session, tenant_id, job_id))


def get_job(session: Session, tenant_id: str, job_id: str) -> Job:
    try:
        return jobs.get_job(session, tenant_id, job_id)
    except NotFound:
        raise NotFound(f"No such fine-tuning job: {job_id}") from None


def list_fine_tuning_jobs(
    session: Session, tenant_id: str, *, limit: int, after: str | None
) -> OpenAIPage[FineTuningJob]:
    rows = jobs.list_jobs(session, tenant_id, limit=limit + 1, after=after, status=None)
    return page([fine_tuning_job(session, job) for job in rows[:limit]], len(rows) > limit)


def change_status(
    session: Session,
    tenant_id: str,
    job_id: str,
    change: Callable[[Session, str, str], Job],
) -> FineTuningJob:
    get_job(session, tenant_id, job_id)  # OpenAI's 404 wording
    return fine_tuning_job(session, change(session, tenant_id, job_id))


# --- events and checkpoints --------------------------------------------------------------

# A tripped guard (docs/guards.md) is a warning too.
EVENT_LEVELS = {"warning": "warn", "guard_tripped": "warn", "error": "error"}


def list_events(
    session: Session, tenant_id: str, job_id: str, *, limit: int, after: str | None
) -> OpenAIPage[FineTuningJobEvent]:
    """Newest first, as OpenAI lists them: the job's events as messages and each training
    step as a metrics event (reward means, per-grader scores and errors, validation reward)."""
    job = get_job(session, tenant_id, job_id)
    # Ordered by the exact time (the objects carry whole seconds), then by id or step.
    timed = [
        (
            event.created_at,
            event.id,
            FineTuningJobEvent(
                id=f"ftevent-{event.id}",
                created_at=int(event.created_at.timestamp()),
                level=EVENT_LEVELS.get(event.kind, "info"),  # type: ignore[arg-type]
                message=event.message,
                data={"kind": event.kind, **(event.data or {})},
                type="message",
            ),
        )
        for event in EventRepository(session).list_events(job.id, after_id=0, limit=1_000_000)
    ]
    timed.extend(step_events(session, job))
    timed.sort(key=lambda entry: (entry[0], entry[1]), reverse=True)
    return page_after([event for _, _, event in timed], limit, after)


def step_events(session: Session, job: Job) -> list[tuple[datetime, int, FineTuningJobEvent]]:
    if job.method == "sft":
        return supervised_step_events(session, job)
    repository = StepRepository(session)
    grader = job_grader(session, job)
    main = reward_name(grader.name) if grader is not None else None
    parts = part_reward_names(grader) if grader is not None else {}
    validation = {
        evaluation.step: evaluation
        for evaluation in repository.list_evaluations(job.id, after_step=0, limit=1_000_000)
    }
    events = []
    for row in repository.list_steps(job.id, after_step=0, limit=1_000_000):
        functions = json.loads(row["reward_functions"] or "{}")
        named = parts or ({grader.name: main} if grader is not None and main else {})
        if not named:
            named = {name: name for name in functions}
        evaluation = validation.get(row["step"])
        data = {
            "step": row["step"],
            "train_reward_mean": row["reward_mean"],
            "train_reward_std": row["reward_std"],
            "valid_reward_mean": evaluation.reward_mean if evaluation is not None else None,
            "scores": {
                grader_name: functions.get(function, {}).get("mean")
                for grader_name, function in named.items()
            },
            "errors": {
                grader_name: functions.get(function, {}).get("errors", 0)
                for grader_name, function in named.items()
            },
            "error_rate": (functions.get(main, {}).get("error_rate") if main is not None else None),
            "loss": row["loss"],
            "kl": row["kl"],
            "learning_rate": row["learning_rate"],
            "frac_reward_zero_std": row["frac_reward_zero_std"],
            "config_version": row["config_version"],
        }
        message = (
            f"Step {row['step']}/{job.hyperparameters['train_steps']}: "
            f"train reward mean {row['reward_mean']}"
        )
        events.append(metrics_event(row, message, data))
    return events


def metrics_event(
    row: Any, message: str, data: dict[str, Any]
) -> tuple[datetime, int, FineTuningJobEvent]:
    """A step's metrics event (a list_steps row), keyed for list_events' ordering."""
    return (
        row["created_at"],
        row["step"],
        FineTuningJobEvent(
            id=f"ftevent-step-{row['step']}",
            created_at=int(row["created_at"].timestamp()),
            level="info",
            message=message,
            data=data,
            type="metrics",
        ),
    )


def supervised_metrics(row: Any) -> dict[str, Any]:
    """A supervised step's metrics under OpenAI's names (a list_steps row)."""
    logged = json.loads(row["metrics"] or "{}")
    return {
        "train_loss": row["loss"],
        "train_mean_token_accuracy": logged.get("mean_token_accuracy"),
        "valid_loss": logged.get("eval_loss"),
        "valid_mean_token_accuracy": logged.get("eval_mean_token_accuracy"),
    }


def supervised_step_events(
    session: Session, job: Job
) -> list[tuple[datetime, int, FineTuningJobEvent]]:
    """One metrics event per step, as OpenAI writes a supervised job's."""
    total = job.hyperparameters["train_steps"]
    events = []
    for row in StepRepository(session).list_steps(job.id, after_step=0, limit=1_000_000):
        loss = "none" if row["loss"] is None else f"{row['loss']:.4f}"
        data = {
            "step": row["step"],
            "total_steps": total,
            **supervised_metrics(row),
            "learning_rate": row["learning_rate"],
        }
        events.append(metrics_event(row, f"Step {row['step']}/{total}: training loss={loss}", data))
    return events


def list_checkpoints(
    session: Session, tenant_id: str, job_id: str, *, limit: int, after: str | None
) -> OpenAIPage[FineTuningJobCheckpoint]:
    job = get_job(session, tenant_id, job_id)
    records = StepRepository(session)
    steps = {row["step"]: row for row in records.list_steps(job.id, after_step=0, limit=1_000_000)}
    rewards = records.evaluation_rewards(job.id)
    checkpoints = [
        FineTuningJobCheckpoint(
            id=f"ftckpt-{job.id}-{checkpoint.step}",
            created_at=int(checkpoint.created_at.timestamp()),
            fine_tuned_model_checkpoint=fine_tuned_model_name(
                job.base_model, job.id, checkpoint.step
            ),
            fine_tuning_job_id=job.id,
            step_number=checkpoint.step,
            metrics=checkpoint_metrics(
                job, checkpoint.step, steps.get(checkpoint.step), rewards.get(checkpoint.step)
            ),
        )
        for checkpoint in sorted(
            CheckpointRepository(session).list_checkpoints(job.id),
            key=lambda c: c.step,
            reverse=True,
        )
    ]
    return page_after(checkpoints, limit, after)


def checkpoint_metrics(
    job: Job, step: int, row: Any | None, valid_reward_mean: float | None
) -> CheckpointMetrics:
    if job.method == "sft":
        return CheckpointMetrics(step=step, **(supervised_metrics(row) if row is not None else {}))
    return CheckpointMetrics(
        step=step,
        train_loss=row["loss"] if row is not None else None,
        train_reward_mean=row["reward_mean"] if row is not None else None,
        valid_reward_mean=valid_reward_mean,
    )


# --- pages -------------------------------------------------------------------------------


def page(items: Sequence[Item], has_more: bool) -> OpenAIPage[Item]:
    return OpenAIPage[Item](
        data=list(items),
        has_more=has_more,
        first_id=getattr(items[0], "id", None) if items else None,
        last_id=getattr(items[-1], "id", None) if items else None,
    )


def page_after(items: list[Item], limit: int, after: str | None) -> OpenAIPage[Item]:
    """One page of an ordered list, after the item whose id is ``after``."""
    if after is not None:
        ids = [getattr(item, "id", None) for item in items]
        items = items[ids.index(after) + 1 :] if after in ids else []
    return page(items[:limit], len(items) > limit)
