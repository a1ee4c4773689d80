"""Live reward updates: read and replace a job's editable config, versioned.

A stored version is picked up by the worker at its next step boundary (see
workers.database_observer.DatabaseObserver.poll_reward_config); nothing here touches a running
trainer directly.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from sqlalchemy.orm import Session

from service.agent_code.schemas import EnvironmentConfig, ToolConfig
from service.artifacts.repository import CheckpointRepository
from service.datasets.repository import DatasetRepository
from service.errors import BadRequest, Conflict, PreconditionFailed, PreconditionRequired
from service.events.repository import EventRepository
from service.http_tools.service import http_declaration
from service.job_configs.proposed import (
    AgentCode,
    agent_code_after,
    check_read_only_fields,
    check_stays_what_it_was,
    load_proposed_agent_code,
    secrets_after,
)
from service.job_configs.repository import ENVIRONMENT, TOOL, JobConfigRepository, StoredFunction
from service.job_configs.schemas import (
    JobConfig,
    JobConfigUpdate,
    JobConfigUpdated,
    RewardFunctionConfig,
    RewardModelConfig,
)
from service.jobs.repository import JobRepository
from service.jobs.service import get_job
from service.jobs.status import JobStatus
from service.models import Job, JobConfigVersion, RewardFunctionVersion
from service.reward_functions.schemas import REWARD_MODEL_FORM, stored_source
from service.reward_functions.service import (
    PREFLIGHT_ROWS,
    check_reward_functions,
    check_reward_models,
    preflight,
)
from service.secrets import seal
from service.settings import get_settings


def label(name: str, version: int) -> str:
    return f"{name}_v{version}"


def _to_schema(session: Session, job: Job, config: JobConfigVersion) -> JobConfig:
    configs = JobConfigRepository(session)
    functions = configs.stored_functions(config)
    tools, environments = configs.stored_agent_code(config)
    return JobConfig(
        job_id=job.id,
        version=config.version,
        reward_functions={function.name: _function_config(function) for function in functions},
        tools={
            tool.name: ToolConfig(
                source=tool.source,
                http=http_declaration(tool.source),
                version=tool.version,
                label=label(tool.name, tool.version),
            )
            for tool in tools
        },
        environments={
            environment.name: EnvironmentConfig(
                source=environment.source,
                class_name=environment.class_name,
                weight=environment.weight,
                version=environment.version,
                label=label(environment.name, environment.version),
            )
            for environment in environments
        },
        temperature=config.temperature,
        top_p=config.top_p,
        allow_network=job.allow_network,
        runtime_packages=list(job.runtime_packages or []),
        secret_names=list(job.secret_names or []),
        created_at=config.created_at,
        applied_at_step=config.applied_at_step,
    )


def _function_config(function: StoredFunction) -> RewardFunctionConfig | RewardModelConfig:
    shown = {
        "weight": function.weight,
        **function.settings,
        "version": function.version,
        "label": label(function.name, function.version),
    }
    if function.is_reward_model:
        return RewardModelConfig(model=function.source, **shown)
    return RewardFunctionConfig(source=function.source, **shown)


def get_config(session: Session, tenant_id: str, job_id: str) -> JobConfig:
    job = get_job(session, tenant_id, job_id)
    config = JobConfigRepository(session).get_config_version(job.id, job.config_version)
    assert config is not None, "every job has its current config version"
    return _to_schema(session, job, config)


def list_config_versions(session: Session, tenant_id: str, job_id: str) -> list[JobConfig]:
    job = get_job(session, tenant_id, job_id)
    return [
        _to_schema(session, job, config)
        for config in JobConfigRepository(session).list_config_versions(job.id)
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


def _validate(
    session: Session,
    job: Job,
    update: JobConfigUpdate,
    secrets: dict[str, str],
    agent_code: AgentCode,
) -> tuple[dict[str, str], list[str]]:
    """The same checks as at job creation: broken code (or a reward model that is none) is a
    400 naming the function, tool or environment. The entries' forms, and the reward models'
    warnings."""
    check_read_only_fields(job, update)
    forms = check_reward_functions(update.reward_functions)
    warnings = check_reward_models(update.reward_functions)
    check_stays_what_it_was(session, job, agent_code)
    load_proposed_agent_code(job, update, agent_code, secrets)
    if update.reward_functions and not job.runtime_packages:
        rows = DatasetRepository(session).rows(job.dataset_id, limit=PREFLIGHT_ROWS)
        preflight(
            rows,
            update.reward_functions,
            allow_network=job.allow_network,
            secrets=secrets,
            agent=bool(agent_code.tools or agent_code.environments),
            egress_hosts=job.egress_hosts or [],
        )
    return forms, warnings


@dataclass
class Changes:
    """What a config version changes of one kind of code, against the current version."""

    changed: list[str] = field(default_factory=list)  # the same name, a new version
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def _versions_for(
    code: Mapping[str, Hashable],
    latest: Mapping[str, tuple[int, Hashable]],
    current: Mapping[str, Mapping[str, Any]],
    store: Callable[[str, int], None],
) -> tuple[dict[str, int], Changes]:
    """The version each named piece of ``code`` gets, and the changes against ``current``
    (the current config's entries).

    Code the same as its latest stored version keeps that version (a rollback to an older
    source is a new version: versions only grow); other code gets the next one, stored with
    ``store(name, version)``. Reward functions, tools and environments are versioned alike.
    """
    versions: dict[str, int] = {}
    changes = Changes()
    for name, text in code.items():
        previous = latest.get(name)
        if previous is not None and previous[1] == text:
            version = previous[0]
        else:
            version = previous[0] + 1 if previous is not None else 1
            store(name, version)
        if name not in current:
            changes.added.append(name)
        elif int(current[name]["version"]) != version:
            changes.changed.append(name)
        versions[name] = version
    changes.removed = [name for name in current if name not in versions]
    return versions, changes


def _check_version(job: Job, if_match: str | None) -> None:
    if if_match is None:
        raise PreconditionRequired(
            "If-Match is required: send the config's ETag (GET /v1/jobs/{id}/config answers "
            f"it; now '\"{job.config_version}\"'), or '*' to replace whatever version is "
            "current"
        )
    if JobStatus(job.status).is_terminal:
        raise Conflict(f"job {job.id} is {job.status}; its config can no longer change")
    expected = parse_if_match(if_match)
    if expected is not None and expected != job.config_version:
        raise PreconditionFailed(
            f"config version {expected} is stale: the current version is {job.config_version}. "
            "Get the config again and re-apply your change."
        )


def first_step_of_next_version(session: Session, job: Job) -> int:
    """The step that will be the first to use a config version stored now.

    Read under the job's row lock. A running worker writes ``started_step`` under that lock
    as it begins a step, and reads the newest version in the same statement, so the step
    after ``started_step`` is exactly where the worker picks up what is stored now. A queued
    job starts (or resumes) after its latest checkpoint, with the newest version.
    """
    if job.status == JobStatus.QUEUED.value:
        checkpoint = CheckpointRepository(session).latest_checkpoint(job.id)
        return (checkpoint.step if checkpoint is not None else 0) + 1
    return job.started_step + 1


def _version_agent_code(
    configs: JobConfigRepository, job: Job, current: JobConfigVersion, agent_code: AgentCode
) -> tuple[dict[str, Any], dict[str, Any], Changes, Changes]:
    """The new config version's tools and environments entries (new code stored as new
    versions), and what changed in each against ``current``."""
    tools = {tool.name: tool for tool in agent_code.tools}
    tool_versions, tool_changes = _versions_for(
        {name: tool.source for name, tool in tools.items()},
        {
            name: (row.version, row.source)
            for name, row in configs.latest_agent_code_versions(job.id, TOOL).items()
        },
        current.tools or {},
        lambda name, version: configs.add_tool_version(
            job.id, replace(tools[name], version=version)
        ),
    )
    environments = {environment.name: environment for environment in agent_code.environments}
    # The class is part of an environment's code: the same source with another class is
    # another environment.
    environment_versions, environment_changes = _versions_for(
        {name: (env.source, env.class_name) for name, env in environments.items()},
        {
            name: (row.version, (row.source, row.class_name))
            for name, row in configs.latest_agent_code_versions(job.id, ENVIRONMENT).items()
        },
        current.environments or {},
        lambda name, version: configs.add_environment_version(
            job.id, replace(environments[name], version=version)
        ),
    )
    return (
        {name: {"version": version} for name, version in tool_versions.items()},
        {
            name: {"version": version, "weight": environments[name].weight}
            for name, version in environment_versions.items()
        },
        tool_changes,
        environment_changes,
    )


def update_config(
    session: Session,
    tenant_id: str,
    job_id: str,
    update: JobConfigUpdate,
    *,
    if_match: str | None,
) -> JobConfigUpdated:
    job = get_job(session, tenant_id, job_id)
    if job.method != "grpo":
        raise BadRequest(
            f"job {job_id!r} trains with method {job.method!r}, on its dataset's answers: it "
            "has no reward functions, tools or sampling to change"
        )
    _check_version(job, if_match)
    configs = JobConfigRepository(session)
    # Updates of one job take turns, so each is built on the version it follows: none is lost
    # and each gets its own version. The turn is not the job's row lock, which the worker needs
    # to begin each step: validation runs the code in the sandbox (seconds) while holding it.
    configs.wait_for_update_turn(job.id)
    session.refresh(job)  # what an update that held the turn before this one stored
    _check_version(job, if_match)
    secrets = secrets_after(job, update)
    agent_code = agent_code_after(session, job, update)
    forms, warnings = _validate(session, job, update, secrets, agent_code)
    # Only the new version's few writes hold the row lock.
    session.refresh(job, with_for_update=True)
    if update.secrets:
        job.secrets_sealed = seal(secrets, get_settings())
        job.secret_names = sorted(secrets)

    current = configs.get_config_version(job.id, job.config_version)
    assert current is not None

    def store_function(name: str, version: int) -> None:
        configs.add_function_version(
            RewardFunctionVersion(
                job_id=job.id,
                name=name,
                version=version,
                source=stored_source(update.reward_functions[name]),
                form=forms[name],
            )
        )

    # A reward model is versioned as code is: by what it names (the same text as code and as
    # a model are two things).
    function_versions, functions = _versions_for(
        {
            name: (forms[name] == REWARD_MODEL_FORM, stored_source(function))
            for name, function in update.reward_functions.items()
        },
        {
            n: (row.version, (row.form == REWARD_MODEL_FORM, row.source))
            for n, row in configs.latest_function_versions(job.id).items()
        },
        current.reward_functions,
        store_function,
    )
    tool_entries, environment_entries, tools, environments = _version_agent_code(
        configs, job, current, agent_code
    )

    job.config_version += 1
    config = JobConfigVersion(
        job_id=job.id,
        version=job.config_version,
        reward_functions={
            name: update.reward_functions[name].config_entry(version)
            for name, version in function_versions.items()
        },
        tools=tool_entries,
        environments=environment_entries,
        temperature=update.temperature if update.temperature is not None else current.temperature,
        top_p=update.top_p if update.top_p is not None else current.top_p,
    )
    configs.add_config_version(config)
    JobRepository(session).notify_changed(job.id)
    applies_from = first_step_of_next_version(session, job)
    EventRepository(session).add_event(
        job.id,
        "config_stored",
        f"config v{config.version} stored; applies from step {applies_from}",
        data={
            "config_version": config.version,
            "changed": functions.changed,
            "added": functions.added,
            "removed": functions.removed,
            "tools": asdict(tools),
            "environments": asdict(environments),
            "secrets_changed": bool(update.secrets),
        },
    )
    for warning in warnings:
        EventRepository(session).add_event(job.id, "warning", warning)
    session.flush()
    return JobConfigUpdated(
        version=config.version,
        applies_from_step=applies_from,
        secrets_changed=bool(update.secrets),
        changed_functions=functions.changed,
        added_functions=functions.added,
        removed_functions=functions.removed,
        changed_tools=tools.changed,
        added_tools=tools.added,
        removed_tools=tools.removed,
        changed_environments=environments.changed,
        added_environments=environments.added,
        removed_environments=environments.removed,
        config=_to_schema(session, job, config),
    )
