"""What a config update proposes, checked against the job before anything is stored: fields
that are fixed at creation, the secrets after the update, and the tools and environments after
it (loaded in the agent sandbox, and kept what they were: a job created without tools cannot
gain them). Both a stored update (service.job_configs.service) and a dry run
(service.job_configs.dry_run) start here."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from sandbox.agent_api import EnvironmentSpec, ToolSpec
from service.agent_code.service import (
    agent_code_specs,
    load_agent_code,
    require_scores,
    tool_timeout,
)
from service.errors import BadRequest, InvalidAgentCode
from service.http_tools.service import check_hosts_kept, compile_http_tool
from service.job_configs.repository import JobConfigRepository
from service.job_configs.schemas import JobConfigUpdate
from service.models import Job
from service.secrets import apply_secret_changes, unseal
from service.settings import get_settings


def check_read_only_fields(job: Job, update: JobConfigUpdate) -> None:
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


def secrets_after(job: Job, update: JobConfigUpdate) -> dict[str, str]:
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


def agent_code_after(session: Session, job: Job, update: JobConfigUpdate) -> AgentCode:
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


def check_stays_what_it_was(session: Session, job: Job, agent_code: AgentCode) -> None:
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


def load_proposed_agent_code(
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
