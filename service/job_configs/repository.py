"""Every SQL statement on a job's config versions, reward-function versions and the versions
of its tools and environments (agent jobs)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select

from sandbox.agent_api import EnvironmentSpec, ToolSpec
from sandbox.api import RewardFunctionSpec
from service.models import AgentCodeVersion, JobConfigVersion, RewardFunctionVersion
from service.repository import Repository
from service.reward_functions.schemas import (
    REWARD_MODEL_FORM,
    reward_model_settings,
    run_settings,
)

# First key of the per-job advisory lock that makes config updates take turns (the second is
# the job's hash; service.events.repository uses another first key).
CONFIG_UPDATE_LOCK_CLASS = 0x5246_5402


@dataclass(frozen=True)
class StoredFunction:
    """One reward function of a stored config version, its source resolved: what the API
    shows (service.job_configs.service) and what the worker loads (``spec()``) alike.

    An entry naming a reward model is one too: its form is REWARD_MODEL_FORM, its source the
    model, its settings the model's (batch_size, max_length)."""

    name: str
    version: int
    source: str
    weight: float
    # Run settings stored with the entry (older entries have none: the defaults apply).
    settings: dict[str, Any]
    form: str = ""

    @property
    def is_reward_model(self) -> bool:
        return self.form == REWARD_MODEL_FORM

    def spec(self) -> RewardFunctionSpec:
        return RewardFunctionSpec(
            name=self.name,
            source=self.source,
            weight=self.weight,
            version=self.version,
            **self.settings,
        )


# agent_code_versions.kind
TOOL = "tool"
ENVIRONMENT = "environment"


@dataclass(frozen=True)
class StoredTool:
    """One tool of a stored config version, its source resolved (API and worker alike)."""

    name: str
    version: int
    source: str

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, source=self.source, version=self.version)


@dataclass(frozen=True)
class StoredEnvironment:
    """One environment of a stored config version, its source resolved."""

    name: str
    version: int
    source: str
    class_name: str
    weight: float

    def spec(self) -> EnvironmentSpec:
        return EnvironmentSpec(
            name=self.name,
            source=self.source,
            class_name=self.class_name,
            version=self.version,
            weight=self.weight,
        )


class JobConfigRepository(Repository):
    def add_function_version(self, version: RewardFunctionVersion) -> None:
        self.session.add(version)

    def wait_for_update_turn(self, job_id: str) -> None:
        """Wait until no other transaction is updating this job's config; the turn is held
        until this transaction ends. Only config updates take it: never the worker."""
        self.session.execute(
            select(func.pg_advisory_xact_lock(CONFIG_UPDATE_LOCK_CLASS, func.hashtext(job_id)))
        )

    def add_config_version(self, config: JobConfigVersion) -> None:
        self.session.add(config)

    def get_config_version(self, job_id: str, version: int) -> JobConfigVersion | None:
        return self.session.scalar(
            select(JobConfigVersion).where(
                JobConfigVersion.job_id == job_id, JobConfigVersion.version == version
            )
        )

    def list_config_versions(self, job_id: str) -> list[JobConfigVersion]:
        return list(
            self.session.scalars(
                select(JobConfigVersion)
                .where(JobConfigVersion.job_id == job_id)
                .order_by(JobConfigVersion.version)
            )
        )

    def function_sources(
        self, job_id: str, keys: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], RewardFunctionVersion]:
        if not keys:
            return {}
        names = {name for name, _ in keys}
        rows = self.session.scalars(
            select(RewardFunctionVersion).where(
                RewardFunctionVersion.job_id == job_id, RewardFunctionVersion.name.in_(names)
            )
        )
        wanted = set(keys)
        return {(r.name, r.version): r for r in rows if (r.name, r.version) in wanted}

    def latest_function_versions(self, job_id: str) -> dict[str, RewardFunctionVersion]:
        latest: dict[str, RewardFunctionVersion] = {}
        rows = self.session.scalars(
            select(RewardFunctionVersion)
            .where(RewardFunctionVersion.job_id == job_id)
            .order_by(RewardFunctionVersion.version)
        )
        for row in rows:
            latest[row.name] = row
        return latest

    def stored_functions(self, config: JobConfigVersion) -> list[StoredFunction]:
        """``config``'s reward functions in their stored order, each with its source."""
        keys = [(name, int(entry["version"])) for name, entry in config.reward_functions.items()]
        sources = self.function_sources(config.job_id, keys)
        functions = []
        for name, version in keys:
            row = sources[(name, version)]
            entry = config.reward_functions[name]
            is_model = row.form == REWARD_MODEL_FORM
            functions.append(
                StoredFunction(
                    name=name,
                    version=version,
                    source=row.source,
                    weight=float(entry["weight"]),
                    settings=reward_model_settings(entry) if is_model else run_settings(entry),
                    form=row.form,
                )
            )
        return functions

    def add_tool_version(self, job_id: str, tool: ToolSpec) -> None:
        self.session.add(
            AgentCodeVersion(
                job_id=job_id, kind=TOOL, name=tool.name, version=tool.version, source=tool.source
            )
        )

    def add_environment_version(self, job_id: str, environment: EnvironmentSpec) -> None:
        self.session.add(
            AgentCodeVersion(
                job_id=job_id,
                kind=ENVIRONMENT,
                name=environment.name,
                version=environment.version,
                source=environment.source,
                class_name=environment.class_name,
            )
        )

    def latest_agent_code_versions(self, job_id: str, kind: str) -> dict[str, AgentCodeVersion]:
        """The newest stored version of each of the job's tools (or environments), by name."""
        latest: dict[str, AgentCodeVersion] = {}
        rows = self.session.scalars(
            select(AgentCodeVersion)
            .where(AgentCodeVersion.job_id == job_id, AgentCodeVersion.kind == kind)
            .order_by(AgentCodeVersion.version)
        )
        for row in rows:
            latest[row.name] = row
        return latest

    def _agent_code_sources(
        self, config: JobConfigVersion
    ) -> dict[tuple[str, str, int], AgentCodeVersion]:
        """The rows ``config``'s tools and environments name, by (kind, name, version)."""
        wanted = {
            (kind, name, int(entry["version"]))
            for kind, entries in (
                (TOOL, config.tools or {}),
                (ENVIRONMENT, config.environments or {}),
            )
            for name, entry in entries.items()
        }
        if not wanted:
            return {}
        rows = self.session.scalars(
            select(AgentCodeVersion).where(
                AgentCodeVersion.job_id == config.job_id,
                AgentCodeVersion.name.in_({name for _, name, _ in wanted}),
            )
        )
        return {
            (row.kind, row.name, row.version): row
            for row in rows
            if (row.kind, row.name, row.version) in wanted
        }

    def stored_agent_code(
        self, config: JobConfigVersion
    ) -> tuple[list[StoredTool], list[StoredEnvironment]]:
        """``config``'s tools and environments in their stored order, each with its source."""
        sources = self._agent_code_sources(config)
        tools = []
        for name, entry in (config.tools or {}).items():
            version = int(entry["version"])
            tools.append(
                StoredTool(name=name, version=version, source=sources[(TOOL, name, version)].source)
            )
        environments = []
        for name, entry in (config.environments or {}).items():
            version = int(entry["version"])
            row = sources[(ENVIRONMENT, name, version)]
            assert row.class_name is not None, "every environment version names its class"
            environments.append(
                StoredEnvironment(
                    name=name,
                    version=version,
                    source=row.source,
                    class_name=row.class_name,
                    weight=float(entry.get("weight", 1.0)),
                )
            )
        return tools, environments
