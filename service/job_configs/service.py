"""Live reward updates: read and replace a job's editable config, versioned.

A stored version is picked up by the worker at its next step boundary (see
workers.training_job.DatabaseObserver.poll_reward_config); nothing here touches a running
trainer directly.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from sandbox.api import RewardCodeError, RewardForm, RewardFunctionSpec
from service.datasets.repository import DatasetRepository
from service.errors import BadRequest, Conflict, InvalidRewardFunction, PreconditionFailed
from service.job_configs.schemas import (
    DryRunResult,
    JobConfig,
    JobConfigUpdate,
    JobConfigUpdated,
    RescoredCompletion,
    RewardFunctionConfig,
)
from service.jobs.repository import JobRepository
from service.jobs.service import get_job
from service.jobs.status import JobStatus
from service.models import Job, JobConfigVersion, RewardFunctionVersion
from service.reward_functions.scoring import score_once
from service.reward_functions.service import PREFLIGHT_ROWS, check_reward_functions, preflight
from service.reward_functions.totals import weighted_total
from service.secrets import unseal
from service.settings import get_settings


def label(name: str, version: int) -> str:
    return f"{name}_v{version}"


def _to_schema(session: Session, job: Job, config: JobConfigVersion) -> JobConfig:
    keys = [(name, int(entry["version"])) for name, entry in config.reward_functions.items()]
    sources = JobRepository(session).function_sources(job.id, keys)
    return JobConfig(
        job_id=job.id,
        version=config.version,
        reward_functions={
            name: RewardFunctionConfig(
                source=sources[(name, version)].source,
                weight=float(config.reward_functions[name]["weight"]),
                version=version,
                label=label(name, version),
            )
            for name, version in keys
        },
        temperature=config.temperature,
        top_p=config.top_p,
        allow_network=job.allow_network,
        runtime_packages=list(job.runtime_packages or []),
        secret_names=list(job.secret_names or []),
        created_at=config.created_at,
        applied_at_step=config.applied_at_step,
    )


def get_config(session: Session, tenant_id: str, job_id: str) -> JobConfig:
    job = get_job(session, tenant_id, job_id)
    config = JobRepository(session).get_config_version(job.id, job.config_version)
    assert config is not None, "every job has its current config version"
    return _to_schema(session, job, config)


def list_config_versions(session: Session, tenant_id: str, job_id: str) -> list[JobConfig]:
    job = get_job(session, tenant_id, job_id)
    return [
        _to_schema(session, job, config)
        for config in JobRepository(session).list_config_versions(job.id)
    ]


def parse_if_match(value: str | None) -> int | None:
    """`If-Match: "3"` (also W/"3" or 3) -> 3. `*` matches any version."""
    if value is None or value.strip() == "*":
        return None
    text = value.strip().removeprefix("W/").strip('"')
    try:
        return int(text)
    except ValueError:
        raise BadRequest(
            f"If-Match must be a config version such as '\"3\"', got {value!r}"
        ) from None


def _validate(session: Session, job: Job, update: JobConfigUpdate) -> dict[str, RewardForm]:
    """The same checks as at job creation: broken code is a 400 naming the function."""
    forms = check_reward_functions(update.reward_functions)
    if not job.runtime_packages:
        rows = DatasetRepository(session).rows(job.dataset_id, limit=PREFLIGHT_ROWS)
        preflight(
            rows,
            update.reward_functions,
            allow_network=job.allow_network,
            secrets=unseal(job.secrets_sealed, get_settings()),
        )
    return forms


def update_config(
    session: Session,
    tenant_id: str,
    job_id: str,
    update: JobConfigUpdate,
    *,
    if_match: str | None,
) -> JobConfigUpdated:
    # The row lock serializes concurrent updates: each gets its own version, none is lost.
    job = get_job(session, tenant_id, job_id, for_update=True)
    if JobStatus(job.status).is_terminal:
        raise Conflict(f"job {job.id} is {job.status}; its config can no longer change")
    expected = parse_if_match(if_match)
    if expected is not None and expected != job.config_version:
        raise PreconditionFailed(
            f"config version {expected} is stale: the current version is {job.config_version}. "
            "Get the config again and re-apply your change."
        )
    forms = _validate(session, job, update)

    repository = JobRepository(session)
    latest = repository.latest_function_versions(job.id)
    current = repository.get_config_version(job.id, job.config_version)
    assert current is not None
    entries: dict[str, dict[str, float | int]] = {}
    changed, added = [], []
    for name, function in update.reward_functions.items():
        previous = latest.get(name)
        if previous is not None and previous.source == function.source:
            version = previous.version
        else:
            version = previous.version + 1 if previous is not None else 1
            repository.add_function_version(
                RewardFunctionVersion(
                    job_id=job.id,
                    name=name,
                    version=version,
                    source=function.source,
                    form=forms[name].value,
                )
            )
        if name not in current.reward_functions:
            added.append(name)
        elif int(current.reward_functions[name]["version"]) != version:
            changed.append(name)
        entries[name] = {"version": version, "weight": function.weight}
    removed = [name for name in current.reward_functions if name not in entries]

    job.config_version += 1
    config = JobConfigVersion(
        job_id=job.id,
        version=job.config_version,
        reward_functions=entries,
        temperature=update.temperature if update.temperature is not None else current.temperature,
        top_p=update.top_p if update.top_p is not None else current.top_p,
    )
    repository.add_config_version(config)
    repository.notify_changed(job.id)
    applies_from = job.steps_completed + 1
    repository.add_event(
        job.id,
        "config_stored",
        f"config v{config.version} stored; applies from step {applies_from} at the earliest",
        data={
            "config_version": config.version,
            "changed": changed,
            "added": added,
            "removed": removed,
        },
    )
    session.flush()
    return JobConfigUpdated(
        version=config.version,
        applies_from_step=applies_from,
        changed_functions=changed,
        added_functions=added,
        removed_functions=removed,
        config=_to_schema(session, job, config),
    )


def dry_run(session: Session, tenant_id: str, job_id: str, update: JobConfigUpdate) -> DryRunResult:
    """Re-score the last recorded step's completions with the proposed functions."""
    job = get_job(session, tenant_id, job_id)
    check_reward_functions(update.reward_functions)
    repository = JobRepository(session)
    last_step = job.steps_completed
    completions = (
        repository.list_completions(job.id, step=last_step, after=None, limit=1_000_000)
        if last_step
        else []
    )
    if not completions:
        return DryRunResult(step=None, completions=[], advantage_sign_changes=0, errors={})
    rows = DatasetRepository(session).rows_at(
        job.dataset_id, {c.dataset_index for c in completions if c.dataset_index is not None}
    )
    specs = [
        RewardFunctionSpec(name=name, source=f.source, weight=f.weight)
        for name, f in update.reward_functions.items()
    ]
    try:
        results = score_once(
            specs,
            [c.prompt for c in completions],
            [c.completion for c in completions],
            [
                rows.get(-1 if c.dataset_index is None else c.dataset_index, {"prompt": c.prompt})
                for c in completions
            ],
            allow_network=job.allow_network,
            secrets=unseal(job.secrets_sealed, get_settings()),
        )
    except RewardCodeError as exc:
        raise InvalidRewardFunction(str(exc)) from None
    names = list(update.reward_functions)
    weights = [update.reward_functions[n].weight for n in names]
    new_totals = [
        weighted_total([results[n].scores[i] for n in names], weights)
        for i in range(len(completions))
    ]
    old_signs = _advantage_signs(
        [c.prompt_index for c in completions], [c.total for c in completions]
    )
    new_signs = _advantage_signs([c.prompt_index for c in completions], new_totals)
    rescored = [
        RescoredCompletion(
            completion_id=c.id,
            prompt_index=c.prompt_index,
            group_position=c.group_position,
            old_scores=c.scores,
            new_scores={n: results[n].scores[i] for n in names},
            old_total=c.total,
            new_total=new_totals[i],
            old_advantage_sign=old_signs[i],
            new_advantage_sign=new_signs[i],
        )
        for i, c in enumerate(completions)
    ]
    return DryRunResult(
        step=last_step,
        completions=rescored,
        advantage_sign_changes=sum(o != n for o, n in zip(old_signs, new_signs, strict=True)),
        errors={n: [e.message for e in r.errors] for n, r in results.items() if r.errors},
    )


def _advantage_signs(groups: list[int], totals: list[float | None]) -> list[int]:
    """Sign of each total against its group's mean: GRPO's advantage sign (scaling by the
    group's std never flips it). A sample without a total gets advantage 0."""
    sums: dict[int, list[float]] = {}
    for group, total in zip(groups, totals, strict=True):
        if total is not None:
            sums.setdefault(group, []).append(total)
    signs = []
    for group, total in zip(groups, totals, strict=True):
        if total is None or group not in sums:
            signs.append(0)
            continue
        mean = sum(sums[group]) / len(sums[group])
        delta = total - mean
        signs.append(0 if abs(delta) < 1e-9 else (1 if delta > 0 else -1))
    return signs
