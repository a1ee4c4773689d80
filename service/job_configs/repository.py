"""Every SQL statement on a job's config versions and reward-function versions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from sandbox.api import RewardFunctionSpec
from service.models import JobConfigVersion, RewardFunctionVersion
from service.reward_functions.schemas import run_settings


@dataclass(frozen=True)
class StoredFunction:
    """One reward function of a stored config version, its source resolved: what the API
    shows (service.job_configs.service) and what the worker loads (``spec()``) alike."""

    name: str
    version: int
    source: str
    weight: float
    # Run settings stored with the entry (older entries have none: the defaults apply).
    settings: dict[str, Any]

    def spec(self) -> RewardFunctionSpec:
        return RewardFunctionSpec(
            name=self.name,
            source=self.source,
            weight=self.weight,
            version=self.version,
            **self.settings,
        )


class JobConfigRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add_function_version(self, version: RewardFunctionVersion) -> None:
        self.session.add(version)

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
        return [
            StoredFunction(
                name=name,
                version=version,
                source=sources[(name, version)].source,
                weight=float(config.reward_functions[name]["weight"]),
                settings=run_settings(config.reward_functions[name]),
            )
            for name, version in keys
        ]
