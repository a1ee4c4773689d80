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

from sandbox.agent_api import EnvironmentSpec, ToolSpec, answer_trajectory
from sandbox.api import FunctionResult, RewardCodeError, RewardFunctionSpec
from service.agent_code.schemas import EnvironmentConfig, ToolConfig
from service.agent_code.service import (
    agent_code_specs,
    load_agent_code,
    require_scores,
    tool_timeout,
)
from service.artifacts.repository import CheckpointRepository
from service.datasets.repository import DatasetRepository
from service.errors import (
    BadRequest,
    Conflict,
    InvalidAgentCode,
    InvalidRewardFunction,
    PreconditionFailed,
    PreconditionRequired,
)
from service.events.repository import EventRepository
from service.http_tools.service import check_hosts_kept, compile_http_tool, http_declaration
from service.job_configs.repository import (
    ENVIRONMENT,
    TOOL,
    JobConfigRepository,
    StoredFunction,
)
from service.job_configs.schemas import (
    DryRunResult,
    JobConfig,
    JobConfigUpdate,
    JobConfigUpdated,
    RescoredCompletion,
    RewardFunctionConfig,
    RewardModelConfig,
)
from service.jobs.repository import JobRepository
from service.jobs.service import get_job
from service.jobs.status import JobStatus
from service.jobs.step_repository import StepRepository
from service.models import Completion, Job, JobConfigVersion, RewardFunctionVersion
from service.reward_functions.schemas import (
    REWARD_MODEL_FORM,
    RewardFunctionCreate,
    code_entries,
    model_entries,
    run_settings,
    stored_source,
)
from service.reward_functions.scoring import score_once
from service.reward_functions.service import (
    PREFLIGHT_ROWS,
    check_reward_functions,
    check_reward_models,
    preflight,
)
from service.reward_functions.totals import weighted_total
from service.secrets import apply_secret_changes, seal, unseal
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


def _check_read_only_fields(job: Job, update: JobConfigUpdate) -> None:
    """A GET document sent back is fine; a read-only field changed in it would be ignored
    silently, so it is refused, saying where that change can be made."""
    if update.job_id is not None and update.job_id != job.id:
        raise BadRequest(f"job_id {update.job_id!r} is not this job ({job.id!r})")
    if update.allow_network is not None and update.allow_network != job.allow_network:
        raise BadRequest("allow_network is fixed at job creation: create a new job to change it")
    if update.runtime_packages is not None and list(update.runtime_packages) != list(
        job.runtime_packages or []
    ):
        raise BadRequest(
            "runtime_packages are fixed at job creation: create a new job to change them"
        )
    if update.secret_names is not None and sorted(update.secret_names) != sorted(
        job.secret_names or []
    ):
        raise BadRequest(
            "secret_names is read-only: set, replace or remove secrets with 'secrets' "
            '({"NAME": "value"} or {"NAME": null})'
        )


def _secrets_after(job: Job, update: JobConfigUpdate) -> dict[str, str]:
    current = unseal(job.secrets_sealed, get_settings())
    if not update.secrets:
        return current
    try:
        return apply_secret_changes(current, update.secrets)
    except ValueError as error:
        raise BadRequest(f"secrets: {error}") from None


@dataclass(frozen=True)
class AgentCode:
    """The tools and environments a config version will have (versions not yet assigned)."""

    tools: list[ToolSpec] = field(default_factory=list)
    environments: list[EnvironmentSpec] = field(default_factory=list)


def _agent_code_after(session: Session, job: Job, update: JobConfigUpdate) -> AgentCode:
    """The update's tools and environments; the current version's where it leaves them out."""
    tool_code: dict[str, str] = {}
    for name, tool in (update.tools or {}).items():
        if tool.http is None:
            tool_code[name] = tool.source
            continue
        if tool.http.name != name:
            raise BadRequest(f"tools: http tool {tool.http.name!r} is given as {name!r}")
        changes = update.secrets or {}
        secret_names = {n for n in job.secret_names or [] if n not in changes} | {
            n for n, value in changes.items() if value is not None
        }
        tool_code[name], host = compile_http_tool(tool.http, secret_names, get_settings())
        check_hosts_kept([host], job.egress_hosts or [], job.allow_network)
    tools, environments = agent_code_specs(tool_code, update.environments or {})
    if update.tools is None or update.environments is None:
        configs = JobConfigRepository(session)
        current = configs.get_config_version(job.id, job.config_version)
        assert current is not None
        stored_tools, stored_environments = configs.stored_agent_code(current)
        if update.tools is None:
            tools = [ToolSpec(name=tool.name, source=tool.source) for tool in stored_tools]
        if update.environments is None:
            environments = [
                EnvironmentSpec(
                    name=env.name, source=env.source, class_name=env.class_name, weight=env.weight
                )
                for env in stored_environments
            ]
    return AgentCode(tools=tools, environments=environments)


def _check_stays_what_it_was(session: Session, job: Job, agent_code: AgentCode) -> None:
    """A job is an agent job or not from its creation: its trainer is built with TRL's tool
    loop (and a chat template that renders tools) or without. Tools given to a job created
    without any would never be called: a 400 rather than an update that silently does nothing."""
    if not (agent_code.tools or agent_code.environments):
        return
    configs = JobConfigRepository(session)
    first = configs.get_config_version(job.id, 1)
    if first is None:
        return
    tools, environments = configs.stored_agent_code(first)
    if not (tools or environments):
        raise InvalidAgentCode(
            "this job was created without tools or environments, so its model cannot call "
            "any: a job's tools and environments can change while it runs, but only a job "
            "created with some has them. Create a new job with them."
        )


def _load_agent_code(
    job: Job, update: JobConfigUpdate, agent_code: AgentCode, secrets: dict[str, str]
) -> None:
    """Load the config's tools and environments in the sandbox: 400 naming one that cannot
    load, or an environment without get_reward in a config without reward functions."""
    loaded = load_agent_code(
        agent_code.tools,
        agent_code.environments,
        allow_network=job.allow_network,
        secrets=secrets,
        runtime_packages=list(job.runtime_packages or []),
        tool_timeout_s=tool_timeout(job.hyperparameters),
    )
    require_scores(loaded, len(update.reward_functions))


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
    _check_read_only_fields(job, update)
    forms = check_reward_functions(update.reward_functions)
    warnings = check_reward_models(update.reward_functions)
    _check_stays_what_it_was(session, job, agent_code)
    _load_agent_code(job, update, agent_code, secrets)
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
    secrets = _secrets_after(job, update)
    agent_code = _agent_code_after(session, job, update)
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


def dry_run(session: Session, tenant_id: str, job_id: str, update: JobConfigUpdate) -> DryRunResult:
    """Re-score the last recorded step's completions with the proposed functions.

    Proposed tools and environments are loaded (400 when they cannot be) but take no part in
    the re-score: that would take new rollouts, not the recorded ones. Reward models are not
    run here (the API has no model runtime): an entry naming the model that scored the step
    keeps its recorded scores (so a new weight is previewed exactly); one naming another
    model is checked, listed in ``not_scored``, and left out of the new totals.
    """
    job = get_job(session, tenant_id, job_id)
    _check_read_only_fields(job, update)
    check_reward_functions(update.reward_functions)
    check_reward_models(update.reward_functions)
    secrets = _secrets_after(job, update)
    _load_agent_code(job, update, _agent_code_after(session, job, update), secrets)
    last_step = job.steps_completed
    completions = (
        StepRepository(session).list_completions(
            job.id, step=last_step, after=None, limit=1_000_000
        )
        if last_step
        else []
    )
    if not completions or not update.reward_functions:
        return DryRunResult(step=None, completions=[], advantage_sign_changes=0, errors={})
    functions = code_entries(update.reward_functions)
    results = _rescore_functions(session, job, functions, completions, secrets)
    recorded = _reward_models_of(session, job.id, completions[0].config_version)
    kept = [
        n for n, e in model_entries(update.reward_functions).items() if recorded.get(n) == e.model
    ]
    not_scored = [n for n in model_entries(update.reward_functions) if n not in kept]
    names = [*functions, *kept]
    weights = [update.reward_functions[n].weight for n in names]

    def new_scores(i: int, completion: Completion) -> dict[str, float | None]:
        scores = {n: results[n].scores[i] for n in functions}
        scores.update({n: completion.scores.get(n) for n in kept})
        return scores

    rescored_scores = [new_scores(i, c) for i, c in enumerate(completions)]
    new_totals = [weighted_total([scores[n] for n in names], weights) for scores in rescored_scores]
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
            new_scores={**rescored_scores[i], **{n: None for n in not_scored}},
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
        not_scored=not_scored,
    )


def _rescore_functions(
    session: Session,
    job: Job,
    functions: Mapping[str, RewardFunctionCreate],
    completions: list[Completion],
    secrets: dict[str, str],
) -> dict[str, FunctionResult]:
    """The proposed functions' results on the recorded completions, in the sandbox."""
    if not functions:
        return {}
    rows = DatasetRepository(session).rows_at(
        job.dataset_id, {c.dataset_index for c in completions if c.dataset_index is not None}
    )
    specs = [
        RewardFunctionSpec(
            name=name,
            source=f.source,
            weight=f.weight,
            **run_settings(f.config_entry(1)),
        )
        for name, f in functions.items()
    ]
    # An agent job's rollouts, as its training scored them (one without a record: a rollout
    # that answered at once).
    trajectories = (
        [c.trajectory or answer_trajectory(c.completion) for c in completions]
        if any(c.trajectory is not None for c in completions)
        else None
    )
    try:
        return score_once(
            specs,
            [c.prompt for c in completions],
            [c.completion for c in completions],
            [
                rows.get(-1 if c.dataset_index is None else c.dataset_index, {"prompt": c.prompt})
                for c in completions
            ],
            allow_network=job.allow_network,
            secrets=secrets,
            runtime_packages=list(job.runtime_packages or []),
            trajectories=trajectories,
            egress_hosts=job.egress_hosts or [],
        )
    except RewardCodeError as exc:
        raise InvalidRewardFunction(str(exc)) from None


def _reward_models_of(session: Session, job_id: str, version: int) -> dict[str, str]:
    """Config ``version``'s reward models: entry name -> the model it names."""
    configs = JobConfigRepository(session)
    config = configs.get_config_version(job_id, version)
    if config is None:
        return {}
    return {f.name: f.source for f in configs.stored_functions(config) if f.is_reward_model}


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
