"""OpenAI's fine-tuning jobs as our jobs: a reinforcement job is created through
service.jobs (same pre-flight, same row, same worker) with its grader compiled into reward
functions, a supervised one as a job of method 'sft', and every job of the tenant reads back
as a fine_tuning.job. Nothing is stored twice: the grader is read back from the reward source
it was compiled into, and OpenAI's hyperparameters from ours (docs/openai-compat.md has the
mapping)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter, ValidationError
from sqlalchemy.orm import Session

from service.base_models.service import BUILT_IN_MODELS
from service.datasets.service import get_dataset
from service.errors import BadRequest, NotFound
from service.events.repository import EventRepository
from service.http_tools.schemas import HttpToolCreate
from service.http_tools.service import http_declaration, seal_header_values
from service.inference.service import (
    UnknownModel,
    fine_tuned_model_name,
    is_fine_tuned_name,
    parse_fine_tuned_name,
)
from service.job_configs.repository import JobConfigRepository
from service.jobs import service as jobs
from service.jobs.hyperparameters import Hyperparameters
from service.jobs.method_datasets import DatasetUnfitForMethod
from service.jobs.schemas import InitFrom, JobCreate
from service.jobs.status import JobStatus
from service.models import Dataset, Job
from service.openai_compat.files.schemas import OpenAIPage
from service.openai_compat.fine_tuning.pages import page
from service.openai_compat.fine_tuning.schemas import (
    FineTuningJob,
    FineTuningJobCreate,
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
    reward_functions,
    reward_name,
    uses_judge,
    with_sealed_headers,
)
from service.openai_compat.graders.schemas import Grader
from service.settings import get_settings

TINY_PRESET = "tiny-cpu"
# Sampled completions per prompt at compute_multiplier 1 is the preset's (or default's)
# num_generations; GRPO needs at least two to compare.
MIN_GENERATIONS = 2
MAX_GENERATIONS = 1024  # past any group size worth sampling; Hyperparameters checks the rest
GRADER_ADAPTER: TypeAdapter[Any] = TypeAdapter(Grader)


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
    """The built-in tiny models train with their own recipe (the tiny-cpu preset); other
    models use ours."""
    return TINY_PRESET if model in BUILT_IN_MODELS else None


# rft's hyperparameters that one of OpenAI's sets (ours -> theirs): a request gives one name
# or the other, never both.
REINFORCEMENT_NAMES = {
    "prompts_per_step": "batch_size",
    "train_steps": "n_epochs",
    "learning_rate": "learning_rate_multiplier",
    "num_generations": "compute_multiplier",
    "eval_every": "eval_interval",
}
SUPERVISED_NAMES = {"train_steps": "n_epochs", "learning_rate": "learning_rate_multiplier"}


def our_extensions(
    theirs: ReinforcementHyperparameters | SupervisedHyperparameters,
    openai_names: Mapping[str, str],
    *,
    param: str,
) -> dict[str, Any]:
    """rft's own hyperparameters given by name beside OpenAI's (temperature,
    max_completion_length, ...: what OpenAI has no name for); 400 for a name that is neither
    OpenAI's nor ours, or one that OpenAI's name for the same setting also sets."""
    given = dict(theirs.model_extra or {})
    for name in given:
        if name not in Hyperparameters.model_fields:
            raise InvalidJobRequest(
                f"{param}.{name} is not a hyperparameter: give OpenAI's ("
                f"{', '.join(type(theirs).model_fields)}) or rft's (docs/hyperparameters.md)",
                param=param,
            )
        openai_name = openai_names.get(name)
        if openai_name is not None and getattr(theirs, openai_name) not in (None, "auto"):
            raise InvalidJobRequest(
                f"{param}: {openai_name} (OpenAI's) and {name} (rft's) set the same thing: "
                "give one",
                param=param,
            )
    return given


def apply_batch_epochs_and_rate(
    theirs: ReinforcementHyperparameters | SupervisedHyperparameters,
    values: dict[str, Any],
    base: Hyperparameters,
    *,
    batch_name: str,
    rows: int,
) -> None:
    """What both methods' hyperparameters share, into ``values``: batch_size as our
    ``batch_name``, n_epochs as train_steps over ``rows`` at that batch, and the learning rate
    multiplier over ``base``'s rate."""
    if isinstance(theirs.batch_size, int):
        values[batch_name] = theirs.batch_size
    batch = values.get(batch_name, getattr(base, batch_name))
    if (train_steps := steps_for_epochs(theirs.n_epochs, rows, batch)) is not None:
        values["train_steps"] = train_steps
    if isinstance(theirs.learning_rate_multiplier, float | int):
        values["learning_rate"] = base.learning_rate * theirs.learning_rate_multiplier


def our_hyperparameters(
    theirs: ReinforcementHyperparameters, *, model: str, seed: int | None, rows: int
) -> Hyperparameters:
    """OpenAI's reinforcement hyperparameters as ours; "auto" (or absent) keeps our value."""
    param = "method.reinforcement.hyperparameters"
    preset = preset_for(model)
    base = Hyperparameters.model_validate({"preset": preset} if preset else {})
    values: dict[str, Any] = {"preset": preset} if preset else {}
    values.update(our_extensions(theirs, REINFORCEMENT_NAMES, param=param))
    apply_batch_epochs_and_rate(theirs, values, base, batch_name="prompts_per_step", rows=rows)
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
    return validated_hyperparameters(values, param=param)


def steps_for_epochs(n_epochs: object, rows: int, rows_per_step: object) -> int | None:
    """OpenAI's n_epochs as our train_steps: steps of ``rows_per_step`` rows enough to go over
    ``rows`` that many times. None keeps our train_steps: n_epochs "auto" or absent, or no
    valid number of rows per step to count with (the hyperparameters' check then names it)."""
    if not isinstance(n_epochs, int):
        return None
    if n_epochs < 1:
        raise InvalidJobRequest("n_epochs must be at least 1", param="n_epochs")
    if not isinstance(rows_per_step, int) or rows_per_step < 1:
        return None
    return max(1, math.ceil(n_epochs * rows / rows_per_step))


def validated_hyperparameters(values: dict[str, Any], *, param: str) -> Hyperparameters:
    try:
        return Hyperparameters.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        if not field:  # a rule across fields: the message names them
            raise InvalidJobRequest(f"hyperparameters: {first['msg']}", param=param) from None
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


@dataclass(frozen=True)
class StartingModel:
    """What OpenAI's ``model`` asks a job to train: a base model, from fresh LoRA weights or
    (OpenAI's "fine-tune a fine-tuned model") from one of the tenant's jobs: our init_from."""

    base_model: str
    init_from: str | None = None


def starting_model(session: Session, tenant_id: str, model: str) -> StartingModel:
    """``ft:<base>:<job id>`` (a job's final adapter) or ``...:ckpt-step-N`` (a checkpoint) as
    that job's base model and init_from; any other name as a base model. 400 for a malformed
    name or the wrong base model, 404 for a job that is not the tenant's."""
    if not is_fine_tuned_name(model):
        return StartingModel(model)
    try:
        parts = parse_fine_tuned_name(model)
    except UnknownModel as exc:
        raise InvalidJobRequest(exc.detail, param="model") from None
    try:
        parent = jobs.get_job(session, tenant_id, parts.job_id)
    except NotFound:
        raise NotFound(f"No such model: {model} (no fine-tuning job {parts.job_id})") from None
    if parent.base_model != parts.base_model:
        raise InvalidJobRequest(
            f"model {model!r}: job {parent.id} trains {parent.base_model!r}, not "
            f"{parts.base_model!r}",
            param="model",
        )
    return StartingModel(parent.base_model, str(InitFrom(parent.id, parts.step)))


def started_from_name(job: Job) -> str:
    """A job's ``model`` as OpenAI shows it: the fine-tuned model it continued, if any."""
    if job.parent_job_id is None:
        return job.base_model
    return fine_tuned_model_name(job.base_model, job.parent_job_id, job.parent_checkpoint_step)


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
    start = starting_model(session, tenant_id, request.model)
    theirs = method.reinforcement.hyperparameters or ReinforcementHyperparameters()
    hyperparameters = our_hyperparameters(
        theirs, model=start.base_model, seed=request.seed, rows=training.row_count
    )
    if report_to:
        hyperparameters = hyperparameters.model_copy(update={"report_to": report_to})
    if method.reinforcement.tools and theirs.max_turns is not None:
        hyperparameters = hyperparameters.model_copy(update={"max_turns": theirs.max_turns})
    judged = uses_judge(grader)
    payload = JobCreate(
        dataset_id=training.id,
        base_model=start.base_model,
        init_from=start.init_from,
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
    param = "method.supervised.hyperparameters"
    preset = preset_for(model)
    base = sft_base(preset)
    values: dict[str, Any] = Hyperparameters.sft_request(
        {
            **({"preset": preset} if preset else {}),
            **our_extensions(theirs, SUPERVISED_NAMES, param=param),
        }
    )
    apply_batch_epochs_and_rate(theirs, values, base, batch_name="batch_size", rows=rows)
    if seed is not None:
        values["seed"] = seed
    return validated_hyperparameters(values, param=param)


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
    start = starting_model(session, tenant_id, request.model)
    hyperparameters = our_supervised_hyperparameters(
        given or SupervisedHyperparameters(),
        model=start.base_model,
        seed=request.seed,
        rows=training.row_count,
    )
    report_to, secrets = integrations(request.integrations)
    if report_to:
        hyperparameters = hyperparameters.model_copy(update={"report_to": report_to})
    payload = JobCreate(
        method="sft",
        dataset_id=training.id,
        base_model=start.base_model,
        init_from=start.init_from,
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
        model=started_from_name(job),
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
